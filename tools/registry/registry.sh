#!/usr/bin/env bash
# A real OCI registry on this machine: CNCF distribution (github.com/distribution/distribution/v3,
# pinned in tools/registry/go.mod, built from the Go module proxy), serving TLS with a CA made at
# start. tools/kind/kind.sh runs one on the kind network's host address; `make release` pushes
# staticip's images and chart to it; the kind nodes pull from it (containerd's hosts.toml) and
# helm installs the chart from it, as from any registry.
#
#   registry.sh build              # _output/bin/registry (skipped when up to date)
#   registry.sh up ADDR DIR        # serve ADDR (ip:port) with state in DIR; a no-op when it does
#   registry.sh down DIR           # stop the registry DIR's pid file names, remove DIR
# (up on a registry that died keeps DIR/certs.d itself: kind nodes bind-mount it)
#
# DIR holds: ca.crt (trust it: SSL_CERT_FILE=DIR/ca.crt for Go programs and helm), the server's
# certificate and key, config.yml, data/, registry.pid, registry.log, and certs.d/ADDR/
# {hosts.toml,ca.crt} — containerd's registry configuration (config_path) for this registry.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
bin="$root/_output/bin"
log() { echo "registry: $*" >&2; }

build() {
  mkdir -p "$bin"
  local stamp="$bin/.registry.stamp" want
  want=$(cat "$root/tools/registry/go.mod" "$root/tools/registry/go.sum" "$root/tools/registry/main.go" "$0" | sha256sum | cut -c1-64)
  if [ -x "$bin/registry" ] && [ "$(cat "$stamp" 2>/dev/null)" = "$want" ]; then
    return 0
  fi
  log "building github.com/distribution/distribution/v3 into $bin/registry"
  (cd "$root/tools/registry" && CGO_ENABLED=0 go build -trimpath -o "$bin/registry.tmp" .)
  mv "$bin/registry.tmp" "$bin/registry"
  echo "$want" >"$stamp"
}

# ourpids are the registries serving DIR's config, found by their command line, not by the
# pid file: tools/kind's engine recovery removes its whole run directory, pid file included,
# while the registry it held keeps running (and its address).
ourpids() {
  # The list is made here, before the pipeline forks: a glob expanded in the grep's own
  # process would list that process, whose arguments hold the pattern.
  local files=(/proc/[0-9]*/cmdline)
  grep -l -s -F "$1/config.yml" "${files[@]}" 2>/dev/null | cut -d/ -f3 || true
}

running() {
  [ -n "$(ourpids "$1")" ]
}

answers() {
  local addr=$1 dir=$2
  curl -fsS --max-time 5 --cacert "$dir/ca.crt" "https://$addr/v2/" >/dev/null 2>&1
}

up() {
  local addr=$1 dir=$2 host=${1%:*}
  if running "$dir" && answers "$addr" "$dir"; then
    return 0
  fi
  stop "$dir"
  # Everything but the certs.d directory itself: a running kind cluster's nodes bind-mount it,
  # and a new directory would not be what they see.
  find "$dir" -mindepth 1 -maxdepth 1 ! -name certs.d -exec rm -rf {} + 2>/dev/null || true
  rm -rf "$dir/certs.d/"*
  build
  mkdir -p "$dir/data" "$dir/certs.d/$addr"
  # A CA made now, for this registry only, and the server's certificate for its IP.
  openssl req -x509 -newkey rsa:2048 -nodes -days 7 -subj "/CN=staticip test registry CA" \
    -keyout "$dir/ca.key" -out "$dir/ca.crt" >/dev/null 2>&1
  openssl req -newkey rsa:2048 -nodes -subj "/CN=$host" -keyout "$dir/server.key" -out "$dir/server.csr" >/dev/null 2>&1
  printf 'subjectAltName=IP:%s\nextendedKeyUsage=serverAuth\n' "$host" >"$dir/server.ext"
  openssl x509 -req -in "$dir/server.csr" -CA "$dir/ca.crt" -CAkey "$dir/ca.key" -CAcreateserial \
    -days 7 -extfile "$dir/server.ext" -out "$dir/server.crt" >/dev/null 2>&1
  rm -f "$dir/ca.key" "$dir/server.csr" "$dir/server.ext"
  cat >"$dir/config.yml" <<YAML
version: 0.1
log:
  level: warn
  accesslog: {disabled: true}
storage:
  filesystem: {rootdirectory: $dir/data}
  delete: {enabled: true}
http:
  addr: $addr
  secret: $(head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \n')
  tls:
    certificate: $dir/server.crt
    key: $dir/server.key
YAML
  # containerd's view (config_path): pull and resolve from this host, trusting the CA.
  cp "$dir/ca.crt" "$dir/certs.d/$addr/ca.crt"
  cat >"$dir/certs.d/$addr/hosts.toml" <<TOML
server = "https://$addr"

[host."https://$addr"]
  capabilities = ["pull", "resolve"]
  ca = "/etc/containerd/certs.d/$addr/ca.crt"
TOML
  setsid "$bin/registry" serve "$dir/config.yml" >"$dir/registry.log" 2>&1 </dev/null &
  echo $! >"$dir/registry.pid"
  local i
  for i in $(seq 1 50); do
    answers "$addr" "$dir" && { log "serving https://$addr (CA $dir/ca.crt, pid $(cat "$dir/registry.pid"))"; return 0; }
    running "$dir" || break
    sleep 0.2
  done
  log "did not answer on https://$addr:"; tail -20 "$dir/registry.log" >&2
  return 1
}

stop() {
  local dir=$1 pid i
  for pid in $(ourpids "$dir"); do
    kill "$pid" 2>/dev/null || true
    for i in $(seq 1 50); do [ -e "/proc/$pid" ] || break; sleep 0.1; done
    [ -e "/proc/$pid" ] && kill -9 "$pid" 2>/dev/null || true
    log "stopped (pid $pid)"
  done
}

down() {
  stop "$1"
  rm -rf "$1"
}

case "${1:-}" in
  build) build ;;
  up) [ $# -eq 3 ] || { echo "usage: $0 up ADDR DIR" >&2; exit 2; }; up "$2" "$3" ;;
  down) [ $# -eq 2 ] || { echo "usage: $0 down DIR" >&2; exit 2; }; down "$2" ;;
  *) echo "usage: $0 build|up ADDR DIR|down DIR" >&2; exit 2 ;;
esac
