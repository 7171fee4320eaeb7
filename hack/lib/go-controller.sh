# What hack/{jobset,kuberay,training-operator,lws,kueue}.sh share: building a controller's main
# package from its Go module through the Go module proxy, cached by version, one build at a time.
# Sourced, not run. The sourcing script sets LOG_TAG (its log lines' prefix) first.
#
#   go_env                          the build environment (no cgo, the module proxy, no workspace)
#   module_dir MODULE VERSION       the module's source directory in the Go module cache
#   build_main DIR MODULE VERSION GO PKG OUT [LDFLAGS] [MAIN_DIR]
#                                   build PKG of MODULE@VERSION into OUT, in a wrapper module
#                                   under DIR/src that requires it (GO: its go directive);
#                                   MAIN_DIR: a main package of our own (hack/go/...) to build
#                                   there instead, against MODULE's packages
#   build_locked DIR WHAT COMPLETE BUILD
#                                   run BUILD under DIR/.build.lock unless COMPLETE holds
#                                   (a second `make test` waits for the first)

log() { printf '[%s] %s\n' "${LOG_TAG:-go}" "$*" >&2; }
die() { log "error: $*"; exit 1; }

go_env() {
  command -v go >/dev/null || die "go is required to build ${LOG_TAG:-it}"
  export CGO_ENABLED=0 GOFLAGS=-mod=mod GOTOOLCHAIN=local GOWORK=off
  export GOPROXY=${GOPROXY:-https://proxy.golang.org,direct}
}

module_dir() {
  local json dir tmp
  tmp=$(mktemp -d)
  json=$(cd "$tmp" && go mod download -json "$1@$2" 2>&1) || true
  rm -rf "$tmp"
  dir=$(sed -n 's/^[[:space:]]*"Dir": "\(.*\)",*$/\1/p' <<<"$json")
  [[ -n "$dir" && -d "$dir" ]] || die "go mod download $1@$2 gave no module directory: $json"
  printf '%s\n' "$dir"
}

build_main() {
  local dir=$1 module=$2 version=$3 go_version=$4 pkg=$5 out=$6 ldflags=${7:-} main_dir=${8:-}
  local src="$dir/src"
  rm -rf "$src" && mkdir -p "$src" "$(dirname "$out")"
  # `go install module@version` asks the proxy for the module's version list, which it may
  # refuse; a wrapper module that requires the exact version builds the same main package.
  printf 'module hybridgpu.local/%s-build\n\ngo %s\n\nrequire %s %s\n' \
    "$(basename "$out")" "$go_version" "$module" "$version" >"$src/go.mod"
  if [[ -n "$main_dir" ]]; then
    cp "$main_dir"/*.go "$src/"
    pkg=.
  fi
  (cd "$src" && nice -n 10 go build -trimpath -ldflags "-s -w $ldflags" -o "$out.tmp" "$pkg") ||
    die "go build $pkg of $module@$version failed"
  mv "$out.tmp" "$out"
}

build_locked() {
  local dir=$1 what=$2 complete=$3 build=$4 start=$SECONDS
  mkdir -p "$dir"
  exec 9>"$dir/.build.lock"
  flock 9
  if ! "$complete"; then
    log "building $what (first time only)"
    "$build"
    log "built $what in $((SECONDS - start))s"
  fi
  flock -u 9
  exec 9>&-
}
