#!/usr/bin/env bash
# A Docker engine for the kind cluster that leaves the machine's other networking alone.
#
#   dockerd.sh up      # use the engine that answers; else start our own (idempotent)
#   dockerd.sh down    # stop the engine we started and remove all it made
#   dockerd.sh env     # print DOCKER_HOST=... for the engine in use
#
# Our own engine (only where none answers and docker.io is installed) runs with its own
# --config-file, data-root, exec-root, pidfile and unix socket under $KIND_STATE_DIR and
# $KIND_RUN_DIR, so it shares nothing with a user's /etc/docker/daemon.json or
# /var/run/docker.sock, and with
#   iptables: false, ip-forward: false, ip-masq: false, bridge: none
# so it adds no iptables rule or chain, changes no FORWARD policy, no ip_forward, and
# creates no docker0: this machine's local clusters live on host bridges and the FORWARD
# chain, which must look the same before, during and after. kind's nodes share one
# user-defined bridge network (tools/kind/kind.sh creates it with a fixed bridge name and
# subnet) and reach the API server through dockerd's userland proxy on 127.0.0.1.
#
# Where the host's capability bounding set lacks capabilities (read from /proc/self/status,
# never assumed) the engine's default runtime is runc-capfix, which drops exactly those
# from each container's spec before it execs runc: privileged containers (kind nodes) need
# it.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
state=${KIND_STATE_DIR:-/var/lib/staticip-kind}
run=${KIND_RUN_DIR:-/run/staticip-kind}
sock="$run/docker.sock"
owned="$state/dockerd.owned"   # present while the engine in use is ours

log() { echo "dockerd: $*" >&2; }

# missing_caps prints the capability numbers the bounding set lacks (empty: full set).
missing_caps() {
  local bnd last i
  bnd=$((16#$(awk '/^CapBnd:/ {print $2}' /proc/self/status)))
  last=$(cat /proc/sys/kernel/cap_last_cap)
  for ((i = 0; i <= last; i++)); do
    (( (bnd >> i) & 1 )) || printf '%s ' "$i"
  done
}

our_engine_answers() { [ -S "$sock" ] && DOCKER_HOST="unix://$sock" timeout 20 docker info >/dev/null 2>&1; }

write_config() {
  local runtime=""
  if [ -n "$(missing_caps)" ]; then
    CGO_ENABLED=0 go build -C "$root/tools" -o "$root/_output/bin/runc-capfix" ./kind/runc-capfix
    install -m 0755 "$root/_output/bin/runc-capfix" "$state/bin/runc-capfix"
    runtime=$(printf ',\n  "runtimes": {"runc-capfix": {"path": "%s"}},\n  "default-runtime": "runc-capfix"' "$state/bin/runc-capfix")
    log "capability bounding set lacks caps $(missing_caps)- default runtime runc-capfix"
  fi
  cat >"$state/daemon.json" <<JSON
{
  "data-root": "$state/docker",
  "exec-root": "$run/docker",
  "pidfile": "$run/dockerd.pid",
  "hosts": ["unix://$sock"],
  "iptables": false,
  "ip6tables": false,
  "ip-forward": false,
  "ip-masq": false,
  "bridge": "none",
  "userland-proxy": true,
  "storage-driver": "overlay2",
  "log-level": "warn",
  "default-address-pools": [{"base": "${KIND_POOL:-10.254.0.0/16}", "size": 24}]$runtime
}
JSON
}

up() {
  if [ ! -e "$owned" ] && [ "${KIND_OWN_DOCKERD:-auto}" != always ] && timeout 20 docker info >/dev/null 2>&1; then
    log "using the running engine ($(docker context inspect -f '{{.Endpoints.docker.Host}}' 2>/dev/null || echo "${DOCKER_HOST:-default}"))"
    return
  fi
  mkdir -p "$state/bin" "$run"
  if our_engine_answers; then
    log "ours is running (pid $(cat "$run/dockerd.pid" 2>/dev/null))"
    return
  fi
  command -v dockerd >/dev/null || { log "no engine answers and dockerd is not installed (make deps installs docker.io)"; exit 1; }
  # A killed engine leaves its pidfile, sockets and mounts: clear them before a restart.
  stop_ours
  write_config
  touch "$owned"
  log "starting dockerd --config-file $state/daemon.json (log $state/dockerd.log)"
  setsid nohup dockerd --config-file "$state/daemon.json" >>"$state/dockerd.log" 2>&1 </dev/null &
  for _ in $(seq 1 120); do
    our_engine_answers && { log "ready (pid $(cat "$run/dockerd.pid"))"; return; }
    sleep 0.5
  done
  log "dockerd did not answer in 60s; last log lines:"; tail -20 "$state/dockerd.log" >&2; exit 1
}

# stop_ours stops our dockerd (and the containerd it manages) and undoes its mounts.
stop_ours() {
  local pid
  pid=$(cat "$run/dockerd.pid" 2>/dev/null || true)
  if [ -n "$pid" ] && [ -e "/proc/$pid" ] && grep -q "$state/daemon.json" "/proc/$pid/cmdline" 2>/dev/null; then
    kill -TERM "$pid"
    for _ in $(seq 1 60); do [ -e "/proc/$pid" ] || break; sleep 0.5; done
    [ -e "/proc/$pid" ] && kill -KILL "$pid"
  fi
  # Its containerd and shims, found by their paths (not by name).
  for p in $(grep -l -s -- "$run/docker" /proc/[0-9]*/cmdline | cut -d/ -f3); do
    kill -KILL "$p" 2>/dev/null || true
  done
  # The containers themselves outlive a killed engine and its shims (a kind node's systemd
  # and kubelet kept running, holding their veths and IPs). Each container's processes are
  # in a cgroup named by its ID; killing the container's PID 1 ends its PID namespace.
  local ids=" " id
  for id in $(ls "$state/docker/containers" 2>/dev/null); do ids+="$id "; done
  for p in $(grep -l -s -E '/docker/[0-9a-f]{64}' /proc/[0-9]*/cgroup | cut -d/ -f3); do
    id=$(grep -o -m1 -E '/docker/[0-9a-f]{64}' "/proc/$p/cgroup" 2>/dev/null | cut -d/ -f3) || continue
    case "$ids" in *" $id "*) kill -KILL "$p" 2>/dev/null || true ;; esac
  done
  # Mounts under our paths, deepest first.
  awk -v a="$state/" -v b="$run/" '$2 ~ "^"a || $2 ~ "^"b {print $2}' /proc/self/mounts | sort -r | while read -r m; do
    umount -l "$m" 2>/dev/null || true
  done
  rm -rf "$run"
}

down() {
  if [ ! -e "$owned" ]; then
    log "the engine in use is not ours: left running"
    return
  fi
  stop_ours
  # The engine's data (images, the node image) stays in $state/docker as a cache; the
  # bridge of the kind network went with the engine (no docker0 was ever made).
  rm -f "$owned"
  log "stopped"
}

case "${1:-}" in
  up) up ;;
  down) down ;;
  env) if [ -e "$owned" ]; then echo "DOCKER_HOST=unix://$sock"; else echo "DOCKER_HOST=${DOCKER_HOST:-}"; fi ;;
  missing-caps) missing_caps; echo ;;
  *) echo "usage: $0 up|down|env|missing-caps" >&2; exit 2 ;;
esac
