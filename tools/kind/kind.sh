#!/usr/bin/env bash
# The kind path: a kind cluster (1 control plane + 2 workers + a failover spare, no default
# CNI) with staticip installed the way a user installs it: released (`make release`) into an
# OCI registry on the kind network's host address (tools/registry), then README's "Installing
# into a cluster" commands (the CRDs from the released chart, then helm upgrade --install of
# oci://<registry>/charts/staticip with tools/kind/values.yaml and this cluster's values in
# place of my-values.yaml). The nodes pull staticip's images from that registry.
#
#   kind.sh up          # engine, node image, registry, cluster, release, install (each a no-op when done)
#   kind.sh down        # delete the cluster, its network, the registry, and the engine if we started it
#   kind.sh leftovers   # fail when anything of ours is left (containers, bridge, mounts,
#                       # processes, iptables rules, host sysctls)
#   kind.sh cluster     # engine, node image, registry, cluster: up without installing staticip
#   kind.sh install     # release into the registry and (re)install from it (helm upgrade --install)
#   kind.sh install-release-of DIR VERSION  # an earlier commit's own make release (checkout DIR), its README's install
#   kind.sh installed   # exit 0 when staticip's Helm release is on the cluster
#   kind.sh uninstall   # charts/staticip/README.md's uninstall of the released chart, verbatim
#   kind.sh quickstart  # README's "A first static-IP workload in five minutes", verbatim
#
# Settings (environment): KIND_CLUSTER (staticip), KIND_STATE_DIR (/var/lib/staticip-kind),
# KIND_RUN_DIR (/run/staticip-kind), KIND_NODE_IMAGE (default: the offline builder's image;
# set kindest/node:v1.36.x where Docker can pull), KIND_SUBNET (10.254.0.0/24),
# KIND_SPARE_NODES (1: failover spares, zone-0), KIND_FAILOVER_WINDOW (5s: the controller
# manager's --node-failover-window; empty: its default, 2m), KIND_IP_FAMILY (dual: kubeadm's
# ipFamily dual, the nodes' network with IPv6 too (KIND_SUBNET6, fd00:10:254::/64, ULA) and
# the dual-stack pools beside the IPv4 one; ipv4: IPv4 only).
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"
bin="$root/_output/bin"
cluster=${KIND_CLUSTER:-staticip}
state=${KIND_STATE_DIR:-/var/lib/staticip-kind}
run=${KIND_RUN_DIR:-/run/staticip-kind}
network=${KIND_NETWORK:-staticip-kind}
subnet=${KIND_SUBNET:-10.254.0.0/24}
bridge=${KIND_BRIDGE:-stkind0}
spares=${KIND_SPARE_NODES:-1}
ip_family=${KIND_IP_FAMILY:-dual}
subnet6=${KIND_SUBNET6:-fd00:10:254::/64}
failover_window=${KIND_FAILOVER_WINDOW-5s}
# The registry (tools/registry): distribution v3 on the kind network's host address, TLS with a
# CA made at its start; containerd's hosts.toml for it in $registry_dir/certs.d, mounted into
# every node as /etc/containerd/certs.d (config_path).
registry_dir="$run/registry"
registry_port=${KIND_REGISTRY_PORT:-5000}
# What the README's commands name: the project's registry (RELEASING.md) and chart version,
# replaced by this machine's registry and the version kind.sh releases.
readme_registry=ghcr.io/staticip
kubeconfig="$state/kubeconfig"
export KUBECONFIG="$kubeconfig"
export KIND_EXPERIMENTAL_DOCKER_NETWORK="$network"
kubectl() { "$bin/kubectl" --kubeconfig "$kubeconfig" "$@"; }
kind() { "$bin/kind" "$@"; }
log() { echo "kind: $*" >&2; }
case "$ip_family" in
  ipv4 | dual) ;;
  *) log "KIND_IP_FAMILY=$ip_family: want ipv4 or dual"; exit 2 ;;
esac

use_engine() {
  "$root/tools/kind/dockerd.sh" up
  local env; env=$("$root/tools/kind/dockerd.sh" env)
  [ -n "${env#DOCKER_HOST=}" ] && export "$env"
  return 0
}

# The nodes' network, made by us so that its bridge has a name we can check for and a
# subnet no local cluster uses (they take 172.31.N.0/24, 10.21N/16, 10.10N/16), and with
# masquerading off (the engine runs without iptables anyway). Dual-stack: an IPv6 subnet too
# (a ULA /64, KIND_SUBNET6), so every node has an IPv6 address and kind gives the kubelet
# both as --node-ip. The bridge's IPv6 address is the nodes' IPv6 gateway, and nothing goes
# further: the engine turns no forwarding on (ip-forward false) and adds no ip6tables rule.
ensure_network() {
  docker network inspect "$network" >/dev/null 2>&1 && return
  local v6=()
  [ "$ip_family" = dual ] && v6=(--ipv6 --subnet "$subnet6")
  docker network create --driver bridge --subnet "$subnet" "${v6[@]}" \
    -o com.docker.network.bridge.name="$bridge" \
    -o com.docker.network.bridge.enable_ip_masquerade=false \
    "$network" >/dev/null
  log "network $network ($subnet${v6:+ and $subnet6}, bridge $bridge)"
}

remove_network() {
  docker network inspect "$network" >/dev/null 2>&1 || return 0
  local c
  for c in $(docker network inspect -f '{{range $id, $e := .Containers}}{{$id}} {{end}}' "$network"); do
    docker network disconnect -f "$network" "$c" >/dev/null 2>&1 || true
  done
  docker network rm "$network" >/dev/null
}

cluster_config() {
  local image=$1
  cat <<YAML
kind: Cluster
apiVersion: kind.x-k8s.io/v1alpha4
name: $cluster
networking:
  # dual: kubeadm's dual-stack (pod and Service subnets of both families; kind's defaults
  # 10.244.0.0/16,fd00:10:244::/56 and 10.96.0.0/16,fd00:10:96::/112, all ULA on the IPv6 side).
  ipFamily: $ip_family
  apiServerAddress: 127.0.0.1
  # staticip's agent is the cluster's only CNI (manifests/cni).
  disableDefaultCNI: true
# Images are pulled from the registry tools/registry runs on the host side of the kind
# network (nothing of staticip is loaded into the nodes): containerd reads a hosts.toml per
# registry (its address, the CA to trust) from the mounted directory.
containerdConfigPatches:
- |-
  [plugins."io.containerd.grpc.v1.cri".registry]
    config_path = "/etc/containerd/certs.d"
nodes:
# Zones as the local cluster's (zone-0: two nodes, zone-1: one), so the grid tests have two
# node units and a node of zone-0 to move into a third; the control plane's NoSchedule
# taint keeps ordinary pods of zone-0 on the first worker.
- role: control-plane
  image: $image
  labels: {zone: zone-0, topology.kubernetes.io/zone: zone-0}
  extraMounts: [{hostPath: $registry_dir/certs.d, containerPath: /etc/containerd/certs.d, readOnly: true}]
- role: worker
  image: $image
  labels: {zone: zone-0, topology.kubernetes.io/zone: zone-0}
  extraMounts: [{hostPath: $registry_dir/certs.d, containerPath: /etc/containerd/certs.d, readOnly: true}]
- role: worker
  image: $image
  labels: {zone: zone-1, topology.kubernetes.io/zone: zone-1}
  extraMounts: [{hostPath: $registry_dir/certs.d, containerPath: /etc/containerd/certs.d, readOnly: true}]
YAML
  # Failover spares, as localcluster's --spare-nodes: the spare label and a NoSchedule taint
  # given at registration (kubeadm join's nodeRegistration.taints, the kubelet's
  # --register-with-taints: the taint node failover removes from a claimed spare does not
  # come back on a kubelet restart), in zone-0, backing its worker (node failover moves a
  # node only to a spare of its own zone). Not zone-1: with a spare there, zone-1 would not
  # vanish when TestGrids moves zone-1's one worker into zone-2.
  local i
  for ((i = 0; i < spares; i++)); do
    cat <<YAML
- role: worker
  image: $image
  labels: {zone: zone-0, topology.kubernetes.io/zone: zone-0, staticip.jke.jdcloud.com/spare: "true"}
  extraMounts: [{hostPath: $registry_dir/certs.d, containerPath: /etc/containerd/certs.d, readOnly: true}]
  kubeadmConfigPatches:
  - |
    kind: JoinConfiguration
    nodeRegistration:
      taints:
      - {key: staticip.jke.jdcloud.com/spare, value: "true", effect: NoSchedule}
YAML
  done
  if [ ! -e /sys/fs/cgroup/cgroup.controllers ]; then
    # cgroup v1 host: kubelet 1.35+ refuses to start on v1 unless told otherwise.
    cat <<YAML
kubeadmConfigPatches:
- |
  kind: KubeletConfiguration
  failCgroupV1: false
YAML
  fi
}

# Every kind node's systemd, containerd, kubelet and kube-proxy take inotify instances of
# the host's root user (kind nodes are not user namespaces), counted against the host's
# fs.inotify.max_user_instances, 128 by default. With the machine's other clusters and
# test API servers that runs out: kube-proxy then exits with "failed complete: too many
# open files" and crash-loops (kind's known issue of that name, which says 512). Raised for
# as long as the cluster is up; down puts the host's value back.
inotify_instances=/proc/sys/fs/inotify/max_user_instances
inotify_min=512

raise_inotify() {
  local cur; cur=$(cat "$inotify_instances")
  [ "$cur" -ge "$inotify_min" ] && return
  [ -e "$state/inotify.restore" ] || echo "$cur" >"$state/inotify.restore"
  echo "$inotify_min" >"$inotify_instances"
  log "fs.inotify.max_user_instances $cur -> $inotify_min while the cluster is up (kind: too many open files)"
}

restore_inotify() {
  [ -e "$state/inotify.restore" ] || return 0
  local was; was=$(cat "$state/inotify.restore")
  echo "$was" >"$inotify_instances"
  rm -f "$state/inotify.restore"
  log "fs.inotify.max_user_instances back to $was"
}

cluster_running() {
  kind get clusters 2>/dev/null | grep -qx "$cluster" || return 1
  local n nodes
  nodes=$(kind get nodes --name "$cluster" 2>/dev/null)
  # As many nodes as configured (a cluster of an older config, without the spare, is redone).
  [ "$(echo "$nodes" | grep -c .)" -eq $((3 + spares)) ] || return 1
  for n in $nodes; do
    [ "$(docker inspect -f '{{.State.Running}}' "$n" 2>/dev/null)" = true ] || return 1
  done
  kubectl get --raw /readyz >/dev/null 2>&1
}

# up_cluster: engine, node image, registry and cluster, without staticip (each a no-op when done).
up_cluster() {
  local t
  mkdir -p "$state"
  use_engine
  t=$SECONDS
  local image=${KIND_NODE_IMAGE:-}
  if [ -z "$image" ]; then
    image=$("$root/tools/kind/nodeimage.sh")
  fi
  log "node image $image ($((SECONDS - t))s)"
  raise_inotify
  # A cluster made from another config (no registry mounts, another node image) is redone.
  cluster_config "$image" >"$state/cluster.yaml.want"
  if cluster_running && cmp -s "$state/cluster.yaml" "$state/cluster.yaml.want"; then
    log "cluster $cluster is up"
    registry_up
  else
    if kind get clusters 2>/dev/null | grep -qx "$cluster"; then
      # Left by a killed engine or a failed up: nodes that do not run cannot be resumed
      # (kind does not restart a cluster), so start over.
      log "cluster $cluster exists but is not healthy or was made from another config: recreating it"
      kind delete cluster --name "$cluster" >&2
    fi
    # A fresh network for a fresh cluster: a killed engine keeps the old nodes' endpoints
    # and their names in its embedded DNS (a new worker then resolved the control plane to a
    # dead node's IP and kubeadm join failed with "connection refused").
    remove_network
    ensure_network
    registry_up
    t=$SECONDS
    mv "$state/cluster.yaml.want" "$state/cluster.yaml"
    kind create cluster --config "$state/cluster.yaml" --kubeconfig "$kubeconfig" --wait 0s >&2
    log "cluster created in $((SECONDS - t))s"
  fi
}

up() {
  local start=$SECONDS t
  up_cluster
  t=$SECONDS
  install
  log "installed in $((SECONDS - t))s; up in $((SECONDS - start))s"
  log "export KUBECONFIG=$kubeconfig"
}

# registry_addr is the registry's address: the kind network's gateway (its bridge's address
# on this machine), which every node reaches, and the port.
registry_addr() {
  local gw
  gw=$(docker network inspect -f '{{range .IPAM.Config}}{{.Gateway}}{{end}}' "$network")
  # An engine that chose the gateway itself does not list it: it is the bridge's address.
  [ -n "$gw" ] || gw=$(ip -4 -o addr show dev "$bridge" 2>/dev/null | awk '{print $4; exit}' | cut -d/ -f1)
  [ -n "$gw" ] || { log "network $network has no gateway address"; exit 1; }
  echo "$gw:$registry_port"
}

# registry_up starts (or keeps) the registry on the network's host address; helm and the
# release tool trust its CA through SSL_CERT_FILE, the nodes through hosts.toml.
registry_up() {
  "$root/tools/registry/registry.sh" up "$(registry_addr)" "$registry_dir"
}

# release_version is the version kind.sh releases: the chart's appVersion, marked as a build of
# this commit (a prerelease: make release takes its notes from CHANGELOG's [Unreleased]), so a
# new commit is a new tag that the nodes pull and helm upgrade rolls to.
release_version() {
  local app rev
  app=$(awk '$1 == "appVersion:" {print $2}' charts/staticip/Chart.yaml | tr -d '"')
  rev=$(git rev-parse --short=12 HEAD 2>/dev/null || echo local)
  if [ -n "$(git status --porcelain --untracked-files=no 2>/dev/null)" ]; then rev+=".dirty"; fi
  echo "$app-dev.$rev"
}

# release publishes this tree with `make release` to the registry: images (linux/amd64 only by
# default: KIND_RELEASE_PLATFORMS; the nodes are amd64 and cross-compiling every binary for
# arm64 too would cost minutes of every CI run), the chart, the plugin archive for this machine.
release() {
  local version=$1 addr
  addr=$(registry_addr)
  make -C "$root" --no-print-directory release VERSION="$version" REGISTRY="$addr/staticip" \
    RELEASE_PLATFORMS="${KIND_RELEASE_PLATFORMS:-linux/amd64}" RELEASE_PLUGIN_PLATFORMS=linux/amd64 \
    KREW_BASE_URL="file://$root/_output/release/{VERSION}" >&2
}

# load_fixtures loads the e2e suite's own images (pause, testserver v1/v2: the tests run them
# with imagePullPolicy Never) with `kind load image-archive`. Nothing of staticip: its images
# come from the registry.
load_fixtures() {
  tools/run.sh kind/images --fixtures --bin-dir "$bin" --out "$state/images" >&2
  local stamp t
  stamp=$( { docker ps -q --no-trunc --filter "label=io.x-k8s.kind.cluster=$cluster" | sort; sha256sum "$state"/images/*.tar | cut -c1-64; } | sha256sum)
  if [ "$(cat "$state/images.loaded" 2>/dev/null)" = "$stamp" ]; then
    log "e2e fixture images already loaded"
    return
  fi
  for t in "$state"/images/*.tar; do
    kind load image-archive --name "$cluster" "$t" >&2
  done
  echo "$stamp" >"$state/images.loaded"
}

# readme_install prints the kubectl and helm commands of the top README's (or README $1's)
# "Installing into a cluster" block, comments stripped: the install a user copies is the
# install we run.
readme_install() {
  awk '/^## Installing into a cluster/ {sec=1; next} sec && /^## / {exit}
       sec && /^```/ {if (blk) exit; blk=1; next}
       blk && /^(kubectl|helm) / {sub(/[ \t]+#.*$/, ""); print}' "${1:-README.md}"
}

# readme_block prints the shell blocks (```sh) of the README section $1 whose first line
# starts with $2, verbatim; of README.md or the file $3.
readme_block() {
  awk -v h="$1" -v mark="$2" '$0 == h {sec=1; next} sec && /^## / {exit}
       sec && /^```sh$/ {blk=1; first=1; next}
       blk && /^```$/ {blk=0; take=0; next}
       blk && first {first=0; take = index($0, mark) == 1}
       blk && take {print}' "${3:-README.md}"
}

# kind_values writes the values of this kind cluster to $state/values.yaml, which replaces the
# README's my-values.yaml (after tools/kind/values.yaml, the fixed ones): one IPPool in
# NodePodCIDR mode over kubeadm's pod subnet (the range allocator mirrors each node's podCIDR,
# which kube-controller-manager allocated, into its IPRange; no range is written per node);
# the agents' --service-cidrs (kubeadm's service subnet: never masqueraded to, cni/README.md
# "Outgoing NAT"); the controller-manager's --node-failover-window (the failover e2e tests need a short one,
# as localcluster's --failover-window=5s gives the local cluster); the edge components with the
# wrapper's API server address: the control-plane node's IP and 6443 (in the API server
# certificate's SANs), not its name — the wrapper is on the host network with
# ClusterFirstWithHostNet, so names go to CoreDNS's ClusterIP, which needs kube-proxy's rules,
# which come through the wrapper. A pod template annotation names the address, so the
# wrappers roll when it changes (a recreated cluster), and only then.
kind_values() {
  local subnets services subnet cp ip edge=true
  subnets=$(kubectl -n kube-system get configmap kubeadm-config -o jsonpath='{.data.ClusterConfiguration}' |
    awk '/podSubnet:/ {print $2; exit}')
  services=$(kubectl -n kube-system get configmap kubeadm-config -o jsonpath='{.data.ClusterConfiguration}' |
    awk '/serviceSubnet:/ {print $2; exit}')
  # Dual-stack: "10.244.0.0/16,fd00:10:244::/56". The default pool is IPv4 (an IPPool is one family).
  subnet=$(tr ',' '\n' <<<"$subnets" | grep -v : | head -1)
  [ -n "$subnet" ] || { log "kubeadm-config has no IPv4 podSubnet ($subnets)"; exit 1; }
  [ -n "$services" ] || { log "kubeadm-config has no serviceSubnet"; exit 1; }
  cp=$(kind get nodes --name "$cluster" | grep control-plane | head -1)
  ip=$(docker inspect -f "{{(index .NetworkSettings.Networks \"$network\").IPAddress}}" "$cp")
  [ -n "$ip" ] || { log "no IP of $cp on network $network"; exit 1; }
  if [ "${KIND_KUBE_PROXY_DIRECT:-0}" = 1 ]; then
    edge=false
    log "KIND_KUBE_PROXY_DIRECT=1: no edge components, kube-proxy talks to the API server directly"
  fi
  cat >"$state/values.yaml" <<YAML
# Written by tools/kind/kind.sh for this kind cluster (after tools/kind/values.yaml).
ipPools:
  - name: default
    cidrs: ["$subnet"]
    mode: NodePodCIDR
controllerManager:
  failover:
    window: "$failover_window"
edge:
  enabled: $edge
  apiServer:
    host: "$ip"
    port: "6443"
  wrapper:
    podAnnotations:
      kind.staticip.io/apiserver: "$ip:6443"
YAML
  # Keys only this tree's chart knows go apart: an earlier release's chart (the upgrade e2e's
  # starting point, install_release_of) refuses values its schema does not have.
  cat >"$state/values-tree.yaml" <<YAML
# Written by tools/kind/kind.sh for this kind cluster: values of this tree's chart only.
agent:
  nat:
    serviceCIDRs: [$(tr ',' '\n' <<<"$services" | sed 's/.*/"&"/' | paste -sd, -)]
YAML
  [ "$ip_family" = dual ] && dual_stack_pools "$subnet" >>"$state/values-tree.yaml"
  return 0
}

# dual_stack_pools prints the pools of a dual-stack kind cluster (KIND_IP_FAMILY=dual), the
# whole ipPools list (a list in a later values file replaces the earlier one): the default IPv4
# pool as in values.yaml, and one pool per family for the namespaces labelled
# e2e-framework=dualstack — the label upstream's e2e framework gives the namespaces of its
# [Feature:IPv6DualStack] specs (tools/conformance), which the suite's dual-stack test gives its
# namespace too. Their pods get an IPv4 and an IPv6 address; every other pod stays IPv4
# single-stack from the default pool, so the rest of the suite runs as on an IPv4 cluster. Blocks
# mode: a node gets a block when such a pod lands there, and gives it back releaseAfter after its
# last pod left (short, so the blocks are gone again before the tests that list every range of a
# node). The CIDRs lie outside kubeadm's pod subnets (nothing there to collide with), ULA on the
# IPv6 side; kube-proxy masquerades their traffic to Services (its clusterCIDR is kubeadm's),
# which changes the source a backend sees, not what reaches it.
dual_stack_pools() {
  local subnet=$1
  cat <<YAML
ipPools:
  - name: default
    cidrs: ["$subnet"]
    mode: NodePodCIDR
  - name: dual-stack-v4
    cidrs: ["${KIND_DUAL_STACK_POOL4:-10.245.0.0/20}"]
    namespaceSelector: {matchLabels: {e2e-framework: dualstack}}
    releaseAfter: 10s
  - name: dual-stack-v6
    cidrs: ["${KIND_DUAL_STACK_POOL6:-fd00:10:245::/112}"]
    namespaceSelector: {matchLabels: {e2e-framework: dualstack}}
    releaseAfter: 10s
YAML
}

# readme_helm_install runs README $1's "Installing into a cluster" commands for release
# $2 of the registry, with the values files $3 (the fixed ones), $state/values.yaml (this
# cluster's) and $4 (more of this cluster's, optional) in place of my-values.yaml.
readme_helm_install() {
  local readme=$1 version=$2 fixed=$3 more=${4:+ -f $4} cmd addr
  mapfile -t cmds < <(readme_install "$readme")
  [ ${#cmds[@]} -gt 0 ] || { log "$readme has no kubectl/helm commands under 'Installing into a cluster'"; exit 1; }
  addr=$(registry_addr)
  for cmd in "${cmds[@]}"; do
    # The README names the project's registry, a chart version and my-values.yaml: here
    # they are this machine's registry, the version just released and this cluster's values.
    cmd=${cmd//-f my-values.yaml/-f $fixed -f $state/values.yaml$more}
    cmd=${cmd//$readme_registry\//$addr/staticip/}
    cmd=$(sed -E "s/--version [^ ]+/--version ${version#v}/" <<<"$cmd")
    log "README: $cmd"
    # Run by the shell as typed (pipes included), with our kubectl and helm first on PATH;
    # CRDs may still be establishing when the next command names their kinds: retry a little.
    local try
    for try in 1 2 3 4 5 6; do
      if PATH="$bin:$PATH" bash -o pipefail -c "$cmd" >"$state/apply.log" 2>&1; then break; fi
      [ $try -eq 6 ] && { cat "$state/apply.log" >&2; exit 1; }
      sleep 5
    done
    if [[ "$cmd" == *"show crds"* ]]; then
      kubectl wait --for condition=Established --timeout=60s crd --all >/dev/null
    fi
  done
}

install() {
  local addr version
  "$root/tools/helm.sh"
  registry_up
  addr=$(registry_addr)
  # helm and the release tool trust the registry's CA (Go's TLS reads SSL_CERT_FILE), so the
  # README's commands run with no insecure or CA flag, as against a public registry.
  export SSL_CERT_FILE="$registry_dir/ca.crt"
  version=$(release_version)
  local t=$SECONDS
  release "$version"
  echo "$version" >"$state/release.version"
  log "released $version to $addr/staticip in $((SECONDS - t))s"
  kind_values
  load_fixtures
  local dns=manifests/edge/coredns
  readme_helm_install README.md "$version" "$root/tools/kind/values.yaml" "$state/values-tree.yaml"
  kubectl -n kube-system rollout status daemonset/staticip-agent --timeout=300s >&2
  kubectl wait --for condition=Ready node --all --timeout=300s >/dev/null
  if [ "${KIND_KUBE_PROXY_DIRECT:-0}" != 1 ]; then
    proxy_via_wrapper
    install_edge_dns "$dns" "$addr/staticip"
  fi
  if [ -n "$(kubectl get --ignore-not-found -n kube-system deployment staticip-scheduler -o name)" ]; then
    replace_scheduler
  fi
  for d in $(kubectl get deployments -A -o jsonpath='{range .items[*]}{.metadata.namespace}/{.metadata.name}{"\n"}{end}'); do
    kubectl -n "${d%/*}" rollout status "deployment/${d#*/}" --timeout=300s >&2
  done
  pulled_not_loaded
}

# install_release_of installs an earlier commit's release, the upgrade e2e's starting point
# (e2e/upgrade_release_test.go, make e2e-kind): in that commit's checkout $1 (a git worktree),
# its own `make release VERSION=$2` (its tools, its sources; linux/amd64 images and plugin) into
# the registry, then that commit's README's "Installing into a cluster" commands with its
# tools/kind/values.yaml and this cluster's values, as install does for the working tree. The
# kubeadm scheduler, kube-proxy and DNS stay as they are: the working tree's install (the
# upgrade) takes them over.
install_release_of() {
  local dir=$1 version=$2 addr t
  [ -f "$dir/README.md" ] && [ -f "$dir/Makefile" ] || { log "$dir is not a checkout of staticip"; exit 1; }
  [ -n "$version" ] || { log "usage: kind.sh install-release-of DIR VERSION"; exit 2; }
  "$root/tools/helm.sh"
  registry_up
  addr=$(registry_addr)
  export SSL_CERT_FILE="$registry_dir/ca.crt"
  # Its helm is ours when it pins the same one (its tools/helm.sh finds the stamp and builds
  # nothing; another pin builds its own).
  mkdir -p "$dir/_output/bin"
  cp -p "$bin/helm" "$bin/.helm.stamp" "$dir/_output/bin/"
  t=$SECONDS
  make -C "$dir" --no-print-directory release VERSION="$version" REGISTRY="$addr/staticip" \
    RELEASE_PLATFORMS=linux/amd64 RELEASE_PLUGIN_PLATFORMS=linux/amd64 \
    KREW_BASE_URL="file://$dir/_output/release/{VERSION}" >&2
  log "released $(git -C "$dir" rev-parse --short=12 HEAD) as $version to $addr/staticip with its own make release in $((SECONDS - t))s"
  kind_values
  load_fixtures
  t=$SECONDS
  readme_helm_install "$dir/README.md" "$version" "$dir/tools/kind/values.yaml"
  kubectl wait --for condition=Ready node --all --timeout=300s >/dev/null
  local w
  for w in $(kubectl get daemonsets,deployments -A -l app.kubernetes.io/managed-by=Helm \
      -o jsonpath='{range .items[*]}{.metadata.namespace}/{.kind}/{.metadata.name}{"\n"}{end}'); do
    kubectl -n "${w%%/*}" rollout status "$(tr '[:upper:]' '[:lower:]' <<<"${w#*/}")" --timeout=300s >&2
  done
  log "installed $version with its README's commands in $((SECONDS - t))s"
}

# installed: is staticip's Helm release on the cluster?
installed() {
  "$bin/helm" status staticip -n kube-system >/dev/null 2>&1
}

# uninstall runs charts/staticip/README.md's "Uninstall" commands for a released chart
# verbatim (helm pull of the installed release's chart, its scripts/uninstall.sh
# --delete-crds) with this machine's registry and the version kind.sh released. The workloads
# that use static IPs must be gone (the script refuses otherwise).
uninstall() {
  local script version addr dir
  version=$(cat "$state/release.version" 2>/dev/null) || { log "nothing released yet (kind.sh up)"; exit 1; }
  script=$(readme_block "## Uninstall" "helm pull" charts/staticip/README.md |
    sed -E 's/[ \t]+#.*$//; s/\[--delete-crds\]/--delete-crds/')
  [ -n "$script" ] || { log "charts/staticip/README.md's Uninstall section has no 'helm pull' block"; exit 1; }
  addr=$(registry_addr)
  script=${script//oci:\/\/<registry>\//oci://$addr/staticip/}
  script=${script//<VERSION>/${version#v}}
  export SSL_CERT_FILE="$registry_dir/ca.crt"
  dir="$state/uninstall"
  rm -rf "$dir"; mkdir -p "$dir"
  log "charts/staticip/README.md's uninstall, verbatim:"$'\n'"$script"
  (cd "$dir" && PATH="$bin:$PATH" bash -euo pipefail -c "$script") >&2
  rm -rf "$dir"
}

# pulled_not_loaded fails unless every staticip container in kube-system runs an image of the
# registry (the chart's and the edge DNS's), i.e. nothing of staticip came from elsewhere.
pulled_not_loaded() {
  local addr bad
  addr=$(registry_addr)
  bad=$(kubectl -n kube-system get pods -o jsonpath='{range .items[*]}{range .spec.containers[*]}{.image}{"\n"}{end}{end}' |
    grep 'staticip' | grep -v "^$addr/staticip/" | sort -u || true)
  if [ -n "$bad" ]; then log "staticip images not from the registry $addr: $bad"; exit 1; fi
  log "every staticip image in kube-system was pulled from $addr/staticip"
}

# quickstart runs the README's "A first static-IP workload in five minutes" workload steps
# (the blocks starting with "# On the cluster") verbatim in one shell, with kubectl-staticip
# from the release's archive, and checks the lines they print.
quickstart() {
  local script version archive dir out
  script=$(readme_block "## A first static-IP workload in five minutes" "# On the cluster")
  [ -n "$script" ] || { log "README.md's five-minute section has no '# On the cluster' block"; exit 1; }
  version=$(cat "$state/release.version" 2>/dev/null) || { log "nothing released yet (kind.sh up)"; exit 1; }
  archive="$root/_output/release/$version/kubectl-staticip_${version}_linux_amd64.tar.gz"
  [ -e "$archive" ] || { log "no $archive (kind.sh up releases it)"; exit 1; }
  dir="$state/quickstart"
  rm -rf "$dir"; mkdir -p "$dir/bin"
  tar -xzf "$archive" -C "$dir/bin"
  log "README five-minute workload, verbatim (kubectl-staticip from $(basename "$archive"))"
  out="$dir/out.log"
  if ! (cd "$dir" && PATH="$dir/bin:$bin:$PATH" bash -euo pipefail -c "$script") 2>&1 | tee "$out" >&2; then
    log "the five-minute workload failed"; exit 1
  fi
  grep -q '^web-1 came back with ' "$out" || { log "quickstart: web-1 did not come back with its IP"; exit 1; }
  grep -q '^rolled, same IPs: ' "$out" || { log "quickstart: the roll changed an IP"; exit 1; }
  log "quickstart passed: web-1 came back with its IP, the roll kept every IP"
}

# proxy_via_wrapper puts kube-proxy behind application-grid-wrapper the way edge/README.md
# ("Install") says for a kubeadm cluster, once the chart's wrapper (edge.enabled) is Ready:
# kubeadm's kube-proxy ConfigMap's kubeconfig.conf replaced by the wrapper's
# (http://127.0.0.1:10266, kube-proxy is on the host network too) and kube-proxy restarted —
# only when it changed, so up twice restarts nothing.
proxy_via_wrapper() {
  kubectl -n kube-system rollout status daemonset/application-grid-wrapper --timeout=300s >&2
  local want have
  want=$(kubectl -n kube-system get configmap kube-proxy-via-application-grid-wrapper -o jsonpath='{.data.kubeconfig\.conf}')
  have=$(kubectl -n kube-system get configmap kube-proxy -o jsonpath='{.data.kubeconfig\.conf}')
  if [ "$want" != "$have" ]; then
    kubectl -n kube-system patch configmap kube-proxy --type merge \
      -p "$(jq -n --arg k "$want" '{data: {"kubeconfig.conf": $k}}')" >/dev/null
    kubectl -n kube-system rollout restart daemonset/kube-proxy >/dev/null
    log "kube-proxy: kubeconfig.conf is the wrapper's (http://127.0.0.1:10266), restarted"
  fi
  kubectl -n kube-system rollout status daemonset/kube-proxy --timeout=300s >&2
}

# install_edge_dns runs the edge DNS the way edge/README.md ("The edge DNS", "Install") says:
# manifests/edge/coredns applied over kubeadm's kube-dns Service (which keeps its clusterIP
# and now selects only the edge CoreDNS pods, with topologyKeys ["zone","*"]), one CoreDNS per
# zone from the DeploymentGrid, then kubeadm's coredns Deployment scaled to 0. It needs the
# wrapper in front of kube-proxy (topologyKeys mean nothing without it): KIND_KUBE_PROXY_DIRECT=1
# or KIND_CENTRAL_DNS=1 keep kubeadm's CoreDNS.
install_edge_dns() {
  local d=$1 registry=${2:-}
  if [ "${KIND_KUBE_PROXY_DIRECT:-0}" = 1 ] || [ "${KIND_CENTRAL_DNS:-0}" = 1 ]; then
    log "$d not installed (KIND_KUBE_PROXY_DIRECT=1 or KIND_CENTRAL_DNS=1): kubeadm's CoreDNS stays the cluster's DNS"
    return
  fi
  log "kubectl apply -k $d (edge/README.md's edge DNS: a CoreDNS per zone behind kube-dns with topologyKeys)"
  # Server-side: kube-dns exists (kubeadm's) with two ports numbered 53, and a client-side
  # apply's strategic merge keys Service ports by number alone; server-side apply keys them
  # by port and protocol. --force-conflicts: the selector and ports were kubeadm's fields.
  if [ -n "$registry" ]; then
    # The released CoreDNS image (make release pushes it): an images: overlay, as the
    # README says for kustomize installs.
    mkdir -p "$state/edge-coredns"
    cat >"$state/edge-coredns/kustomization.yaml" <<YAML
resources: [$(realpath --relative-to="$state/edge-coredns" "$root/$d")]
images:
- {name: staticip/coredns, newName: $registry/coredns}
YAML
    d="$state/edge-coredns"
  fi
  kubectl apply --server-side --force-conflicts -k "$d" >/dev/null 2>"$state/apply.log" || { cat "$state/apply.log" >&2; exit 1; }
  # One Deployment per zone, created by the grid controller.
  local zones i have dep
  zones=$(kubectl get nodes -o jsonpath='{range .items[*]}{.metadata.labels.zone}{"\n"}{end}' | sort -u | grep -c .)
  for i in $(seq 1 120); do
    have=$(kubectl -n kube-system get deployments -o name | grep -c '^deployment.apps/edge-coredns-' || true)
    [ "$have" -ge "$zones" ] && break
    [ "$i" -eq 120 ] && { log "the DeploymentGrid made $have of $zones edge-coredns Deployments in 120 s"; exit 1; }
    sleep 1
  done
  for dep in $(kubectl -n kube-system get deployments -o name | grep '^deployment.apps/edge-coredns-'); do
    kubectl -n kube-system rollout status "$dep" --timeout=300s >&2
  done
  if [ "$(kubectl -n kube-system get deployment coredns -o jsonpath='{.spec.replicas}' 2>/dev/null)" != 0 ]; then
    kubectl -n kube-system scale deployment/coredns --replicas=0 >/dev/null
    log "kubeadm's coredns Deployment scaled to 0: the edge CoreDNS answers kube-dns"
  fi
}

# replace_scheduler stops the control plane's kube-scheduler static pod, so that
# staticip-scheduler (manifests/scheduler/replace-default: profile default-scheduler, the
# same Lease) is the cluster's only scheduler — the step scheduler-plugins/README.md names
# ("stop kube-scheduler first"). Its pods are scheduled by kube-scheduler before it goes.
replace_scheduler() {
  kubectl -n kube-system rollout status deployment/staticip-scheduler --timeout=300s >&2 || true
  local cp
  for cp in $(kind get nodes --name "$cluster" | grep control-plane); do
    if docker exec "$cp" test -e /etc/kubernetes/manifests/kube-scheduler.yaml; then
      docker exec "$cp" mv /etc/kubernetes/manifests/kube-scheduler.yaml /etc/kubernetes/kube-scheduler.yaml.disabled
      log "$cp: kube-scheduler static pod stopped; staticip-scheduler is the default-scheduler"
    fi
  done
  local i
  for i in $(seq 1 120); do
    [ -z "$(kubectl -n kube-system get pods -l component=kube-scheduler -o name 2>/dev/null)" ] && break
    sleep 1
  done
  kubectl -n kube-system rollout status deployment/staticip-scheduler --timeout=300s >&2
}

down() {
  # The cluster's containers live in the engine's data: if our engine is not running (it
  # was killed), start it so that kind can delete them.
  if use_engine_if_up || { [ -d "$state/docker" ] && use_engine; }; then
    if kind get clusters 2>/dev/null | grep -qx "$cluster"; then
      kind delete cluster --name "$cluster" --kubeconfig "$kubeconfig" >&2
    fi
    remove_network || true
  fi
  "$root/tools/registry/registry.sh" down "$registry_dir"
  "$root/tools/kind/dockerd.sh" down
  # A bridge of a network whose engine died with it.
  if ip link show "$bridge" >/dev/null 2>&1; then ip link del "$bridge"; fi
  rm -f "$kubeconfig"
  restore_inotify
  log "down"
}

# use_engine_if_up points docker at the engine in use without starting one.
use_engine_if_up() {
  local env; env=$("$root/tools/kind/dockerd.sh" env)
  [ -n "${env#DOCKER_HOST=}" ] && export "$env"
  timeout 20 docker info >/dev/null 2>&1
}

leftovers() {
  local bad=0
  if use_engine_if_up && [ -n "$(docker ps -aq --filter "label=io.x-k8s.kind.cluster=$cluster")" ]; then
    log "leftover: containers of cluster $cluster"; bad=1
  fi
  if [ -e "$state/dockerd.owned" ]; then log "leftover: our dockerd is marked running"; bad=1; fi
  if grep -l -s -F "$registry_dir/config.yml" /proc/[0-9]*/cmdline >/dev/null 2>&1; then
    log "leftover: the registry (tools/registry) still runs"; bad=1
  fi
  if grep -l -s -e "$state/daemon.json" -e "$run/docker" /proc/[0-9]*/cmdline >/dev/null 2>&1; then
    log "leftover: processes of our engine:"; grep -l -s -e "$state/daemon.json" -e "$run/docker" /proc/[0-9]*/cmdline >&2; bad=1
  fi
  # Processes of the cluster's nodes (a kubelet names its node's provider ID), also when
  # their engine is gone.
  if grep -l -s -F "kind://docker/$cluster/" /proc/[0-9]*/cmdline >/dev/null 2>&1; then
    log "leftover: processes of the cluster's nodes:"; grep -l -s -F "kind://docker/$cluster/" /proc/[0-9]*/cmdline >&2; bad=1
  fi
  if ip link show "$bridge" >/dev/null 2>&1; then log "leftover: bridge $bridge"; bad=1; fi
  if ip -br link | grep -q '^docker0'; then log "leftover: docker0"; bad=1; fi
  if awk -v a="$state/" -v b="$run/" '$2 ~ "^"a || $2 ~ "^"b' /proc/self/mounts | grep -q .; then
    log "leftover: mounts:"; awk -v a="$state/" -v b="$run/" '$2 ~ "^"a || $2 ~ "^"b' /proc/self/mounts >&2; bad=1
  fi
  if iptables-save 2>/dev/null | grep -qiE 'docker|kind'; then log "leftover: iptables rules:"; iptables-save | grep -iE 'docker|kind' >&2; bad=1; fi
  [ -e "$run" ] && { log "leftover: $run"; bad=1; }
  if [ -e "$state/inotify.restore" ]; then
    log "leftover: fs.inotify.max_user_instances is $(cat "$inotify_instances"), the host's was $(cat "$state/inotify.restore")"; bad=1
  fi
  [ $bad -eq 0 ] && log "no leftovers (cached: the node image and rootfs in $state, images in $state/images)"
  return $bad
}

case "${1:-}" in
  up) up ;;
  cluster) up_cluster ;;
  down) down ;;
  install) use_engine; install ;;
  install-release-of) use_engine; install_release_of "${2:-}" "${3:-}" ;;
  installed) installed ;;
  uninstall) use_engine; uninstall ;;
  quickstart) use_engine; quickstart ;;
  leftovers) leftovers ;;
  config) cluster_config "${2:-IMAGE}" ;;
  *) echo "usage: $0 up|cluster|down|install|install-release-of DIR VERSION|installed|uninstall|quickstart|leftovers|config" >&2; exit 2 ;;
esac
