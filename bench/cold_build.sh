#!/usr/bin/env bash
# The cost of one cold build of a `make test` prerequisite, in CPU seconds and wall time.
#
#   bench/cold_build.sh hack/control-plane.sh build
#   bench/cold_build.sh hack/kueue.sh build
#   COLD_BUILD_KEEP=/tmp/kueue-caches bench/cold_build.sh hack/kueue.sh build
#   COLD_BUILD_REUSE=/tmp/kueue-caches bench/cold_build.sh hack/jobset.sh build
#
# The command runs under `nice -n 19` and `/usr/bin/time -v` with an empty GOCACHE, GOMODCACHE
# and HYBRIDGPU_CACHE_DIR of its own under /tmp (never ~/.cache/go-build, ~/go/pkg/mod or
# ~/.cache/hybridgpu), so it builds and downloads everything, as on a fresh CI machine. It
# prints user+sys CPU seconds, wall seconds, the load average before and after, and the wall
# estimate for an idle 2-core machine (CPU / 2: a lower bound, links and downloads are serial).
# The directories are deleted afterwards; COLD_BUILD_KEEP=DIR keeps the Go caches in DIR, and
# COLD_BUILD_REUSE=DIR starts from such kept caches (the cost of a build after another one that
# shares the Go caches, as every build of one `make test` does). Results: docs/development.md.
set -euo pipefail

[[ $# -gt 0 ]] || { echo "usage: $0 COMMAND [ARG...]" >&2; exit 2; }
command -v /usr/bin/time >/dev/null || { echo "$0: /usr/bin/time is missing" >&2; exit 2; }

work=$(mktemp -d /tmp/hybridgpu-cold-build.XXXXXX)
caches=${COLD_BUILD_REUSE:-${COLD_BUILD_KEEP:-$work}}
mkdir -p "$caches/gocache" "$caches/gomodcache" "$work/hybridgpu-cache"
cleanup() {
  # Module cache files are read-only; make them writable to delete them.
  chmod -R u+w "$work" 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT

load_before=$(cut -d' ' -f1-3 /proc/loadavg)
status=0
env GOCACHE="$caches/gocache" GOMODCACHE="$caches/gomodcache" \
  HYBRIDGPU_CACHE_DIR="$work/hybridgpu-cache" \
  nice -n 19 /usr/bin/time -v -o "$work/time.txt" "$@" >"$work/log" 2>&1 || status=$?
load_after=$(cut -d' ' -f1-3 /proc/loadavg)
if [[ $status -ne 0 ]]; then
  tail -n 20 "$work/log" >&2
  echo "$0: '$*' failed with status $status" >&2
  exit 1
fi
awk -v cmd="$*" -v before="$load_before" -v after="$load_after" '
  /User time \(seconds\)/   { user = $NF }
  /System time \(seconds\)/ { sys = $NF }
  /Elapsed \(wall clock\)/  { n = split($NF, p, ":"); wall = 0; for (i = 1; i <= n; i++) wall = wall * 60 + p[i] }
  END {
    cpu = user + sys
    printf "%s: %.0f CPU s (user %.0f + sys %.0f), %.0f s wall here, load %s -> %s; idle 2-core estimate %.1f min\n",
      cmd, cpu, user, sys, wall, before, after, cpu / 2 / 60
  }' "$work/time.txt"
