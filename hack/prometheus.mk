# Prometheus 2.x for the adapter tests: Debian's `prometheus` package (prometheus + promtool).
# Included by the main Makefile (`-include hack/*.mk`). The tests start their own Prometheus
# on a free 127.0.0.1 port (tests/support/prometheus.py); the package's system service is
# never used, so it is kept from starting and stopped if it started anyway.

PROMETHEUS_BIN ?= /usr/bin/prometheus
PROMTOOL_BIN ?= /usr/bin/promtool
export HYBRIDGPU_PROMETHEUS := $(PROMETHEUS_BIN)
export HYBRIDGPU_PROMTOOL := $(PROMTOOL_BIN)

.PHONY: prometheus-bin

## make prometheus-bin: install Debian's prometheus when /usr/bin/prometheus is missing (CI: root)
prometheus-bin:
	@if [ ! -x $(PROMETHEUS_BIN) ] || [ ! -x $(PROMTOOL_BIN) ]; then \
		set -e; \
		added_policy=; \
		if [ ! -e /usr/sbin/policy-rc.d ]; then \
			printf '#!/bin/sh\n# hybridgpu: no services start during package installs\nexit 101\n' \
				> /usr/sbin/policy-rc.d; \
			chmod 0755 /usr/sbin/policy-rc.d; added_policy=1; \
		fi; \
		trap '[ -n "$$added_policy" ] && rm -f /usr/sbin/policy-rc.d' EXIT; \
		apt-get update; \
		DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends prometheus; \
		if command -v systemctl >/dev/null 2>&1 && [ -d /run/systemd/system ]; then \
			systemctl disable --now prometheus >/dev/null 2>&1 || true; \
		fi; \
		if command -v service >/dev/null 2>&1; then service prometheus stop >/dev/null 2>&1 || true; fi; \
	fi
	@$(PROMETHEUS_BIN) --version 2>&1 | head -1
	@$(PROMTOOL_BIN) --version 2>&1 | head -1

TEST_PREREQS += prometheus-bin
