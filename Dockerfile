# The hybridgpu operator image: `docker build -t hybridgpu-operator .`
# Runs `hybridgpu run` as uid 10001 (the Helm chart's runAsUser) on a read-only root filesystem.
FROM python:3.11-slim

ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

WORKDIR /src
COPY pyproject.toml README.md ./
COPY operator ./operator
# The package only (no test extras); pip byte-compiles it here, so nothing is written at run time.
RUN pip install . && rm -rf /src

RUN groupadd --system --gid 10001 hybridgpu \
    && useradd --system --uid 10001 --gid 10001 --no-create-home \
       --home-dir /nonexistent --shell /usr/sbin/nologin hybridgpu

# The root filesystem is read-only in the chart: no .pyc writes, matplotlib's cache in /tmp.
ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    MPLCONFIGDIR=/tmp/matplotlib

WORKDIR /
# kopf liveness (/healthz) and /metrics, as the chart configures them.
EXPOSE 8080 8081
USER 10001:10001
ENTRYPOINT ["hybridgpu"]
CMD ["run"]
