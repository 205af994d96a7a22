#!/usr/bin/env bash
# Builds a kind node image offline and prints its reference. kind's own
# `kind build node-image` pulls etcd, CoreDNS, pause and kindnetd from registries and the
# base image from a registry; none is reachable here. This builder assembles the same
# layout from what can be had offline:
#   - a Debian bookworm rootfs from debootstrap (systemd, iptables, ... as kind's base image
#     installs; containerd 1.6 and runc 1.1 are Debian's, the same packages the local
#     cluster runs and PLATFORM.md checked with kubelet 1.36 — building containerd 2 from
#     its modules needs cgo and a C toolchain for little gain in a test cluster),
#   - kind's base-image files (entrypoint, systemd units, containerd config) from the kind
#     module (tools/kind/kindcli pins v0.32.0) with the steps of its Dockerfile,
#   - kubeadm, kubelet, kubectl v1.36.3 from tools/build-k8s-bins.sh,
#   - the images `kubeadm config images list` names, built by tools/kind/images from our
#     binaries and imported into the rootfs's containerd store (as kind does),
#   - tools/kind/node: runc-capfix for privileged pods where the bounding set lacks
#     capabilities, and a shield for the kubelet's machine-global sysctl writes.
# The image is tagged by a hash of all inputs and rebuilt only when one changes; the
# debootstrap rootfs is cached by its package list.
#
#   nodeimage.sh            # build if needed; prints the image reference on stdout
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"
state=${KIND_STATE_DIR:-/var/lib/staticip-kind}
bin="$root/_output/bin"
work="$state/nodeimage"
mkdir -p "$work"
log() { echo "nodeimage: $*" >&2; }

suite=bookworm
mirror=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
packages=systemd,systemd-sysv,dbus,conntrack,iptables,nftables,iproute2,ethtool,util-linux,mount,kmod,libseccomp2,pigz,e2fsprogs,bash,ca-certificates,curl,jq,procps,containerd,runc,containernetworking-plugins,socat

# 1. The rootfs, cached by suite and package list.
rootfs_key=$(echo "$suite $packages" | sha256sum | cut -c1-12)
rootfs="$work/rootfs-$rootfs_key"
if [ ! -e "$rootfs/.complete" ]; then
  log "debootstrap $suite ($packages) ..."
  start=$SECONDS
  rm -rf "$rootfs.tmp"
  debootstrap --variant=minbase --include="$packages" "$suite" "$rootfs.tmp" "$mirror" >"$work/debootstrap.log" 2>&1 ||
    { tail -20 "$work/debootstrap.log" >&2; exit 1; }
  rm -rf "$rootfs.tmp/var/cache/apt/archives"/*.deb "$rootfs.tmp/var/lib/apt/lists"/*
  touch "$rootfs.tmp/.complete"
  rm -rf "$rootfs"; mv "$rootfs.tmp" "$rootfs"
  log "rootfs in $((SECONDS - start))s"
fi

# 2. Inputs and the image's tag.
for b in kubeadm kubelet kubectl kube-apiserver kube-controller-manager kube-scheduler kube-proxy etcd coredns; do
  [ -x "$bin/$b" ] || { log "$bin/$b is missing (make k8s-bins)"; exit 1; }
done
kind_dir=$(cd tools/kind/kindcli && go list -m -f '{{.Dir}}' sigs.k8s.io/kind)
base_files="$kind_dir/images/base/files"
k8s_version=$("$bin/kubeadm" version -o short)
CGO_ENABLED=0 go build -C tools -o "$bin/runc-capfix" ./kind/runc-capfix
"$bin/kubeadm" config images list --kubernetes-version "$k8s_version" >"$work/refs.txt"
pause_ref=$(grep '/pause:' "$work/refs.txt")
key=$( {
  echo "$rootfs_key"
  cat "$work/refs.txt"
  (cd "$base_files" && find . -type f | sort | xargs sha256sum)
  for b in kubeadm kubelet kubectl kube-apiserver kube-controller-manager kube-scheduler kube-proxy etcd coredns runc-capfix; do
    sha256sum "$bin/$b" | cut -c1-64
  done
  (cd tools/kind && find node images nodeimage.sh -type f | sort | xargs sha256sum)
  sha256sum tools/images/pause/main.go tools/images/imagebuilder/imagebuilder.go
} | sha256sum | cut -c1-12)
image="localhost/staticip/kind-node:$k8s_version-$key"
if docker image inspect "$image" >/dev/null 2>&1; then
  log "$image is up to date"
  echo "$image"
  exit 0
fi
log "building $image ..."
start=$SECONDS

# 3. The node's tree: the rootfs, then kind's base-image steps (images/base/Dockerfile).
tree="$work/tree"
rm -rf "$tree"
cp -a "$rootfs" "$tree"
rm -f "$tree/.complete"
install -d -m 0755 "$tree/kind" "$tree/kind/bin" "$tree/LICENSES" "$tree/etc/kubernetes/manifests" "$tree/opt/cni/bin"
install -m 0755 "$base_files"/usr/local/bin/* "$tree/usr/local/bin/"
install -m 0755 "$base_files"/kind/bin/* "$tree/kind/bin/"
install -m 0644 "$base_files"/kind/README.txt "$tree/kind/" 2>/dev/null || true
install -m 0644 "$base_files"/etc/crictl.yaml "$tree/etc/"
install -D -m 0644 "$base_files"/etc/containerd/config.toml "$tree/etc/containerd/config.toml"
install -D -m 0644 "$base_files"/etc/default/kubelet "$tree/etc/default/kubelet"
install -m 0644 "$base_files"/etc/sysctl.d/* "$tree/etc/sysctl.d/"
install -m 0644 "$base_files"/etc/systemd/system/*.service "$base_files"/etc/systemd/system/*.slice "$tree/etc/systemd/system/"
install -D -m 0644 -t "$tree/etc/systemd/system/kubelet.service.d" "$base_files"/etc/systemd/system/kubelet.service.d/*
find "$tree/lib/systemd/system/sysinit.target.wants/" -name systemd-tmpfiles-setup.service -delete
rm -f "$tree"/lib/systemd/system/multi-user.target.wants/* "$tree"/etc/systemd/system/*.wants/* \
  "$tree"/lib/systemd/system/local-fs.target.wants/* "$tree"/lib/systemd/system/sockets.target.wants/*udev* \
  "$tree"/lib/systemd/system/sockets.target.wants/*initctl* "$tree"/lib/systemd/system/basic.target.wants/*
echo "ReadKMsg=no" >>"$tree/etc/systemd/journald.conf"
ln -sf /usr/lib/systemd/systemd "$tree/sbin/init"
# kind's units start /usr/local/bin/containerd; Debian's is in /usr/bin.
ln -sf /usr/bin/containerd "$tree/usr/local/bin/containerd"
# The CNI plugins containerd itself needs (loopback for every sandbox's lo) and kind's set.
for p in loopback host-local ptp portmap; do cp -a "$tree/usr/lib/cni/$p" "$tree/opt/cni/bin/"; done
# Debian's sysctl.d defaults for a host (kernel.pid_max, fs.protected_*) are machine-global:
# systemd-sysctl in a privileged node would write the host's. The node keeps only kind's and
# ours (net.*, namespaced).
rm -f "$tree/usr/lib/sysctl.d/50-pid-max.conf" "$tree/usr/lib/sysctl.d/99-protect-links.conf" "$tree/etc/sysctl.d/99-sysctl.conf"
# Our additions (tools/kind/node) and runc-capfix.
cp -a tools/kind/node/. "$tree/"
install -m 0755 "$bin/runc-capfix" "$tree/usr/local/sbin/runc-capfix"
chroot "$tree" systemctl enable kubelet.service containerd.service undo-mount-hacks.service staticip-kernel-defaults.service >/dev/null 2>&1
chroot "$tree" systemctl mask systemd-binfmt.service >/dev/null 2>&1
# cri-base.json as kind makes it: containerd's default spec, kind's product-files hook, no rlimits.
ctr oci spec | jq '.hooks.createContainer[.hooks.createContainer | length] |= . + {"path": "/kind/bin/mount-product-files.sh"}' |
  jq 'del(.process.rlimits)' >"$tree/etc/containerd/cri-base.json"
sed -i "s|^\(\s*\)sandbox_image = .*|\1sandbox_image = \"$pause_ref\"|" "$tree/etc/containerd/config.toml"

# 4. Kubernetes (kind's nodeimage build: binaries in /usr/bin, /kind/version).
for b in kubeadm kubelet kubectl; do install -m 0755 "$bin/$b" "$tree/usr/bin/$b"; done
echo "$k8s_version" >"$tree/kind/version"

# 5. The control-plane images, imported into the tree's containerd store by Debian's
# containerd on the host (the same version as the node's) on a socket of its own.
tools/run.sh kind/images --refs "$work/refs.txt" --bin-dir "$bin" --rootfs "$tree" --out "$work/images" >&2
ctrd="$work/containerd"
rm -rf "$ctrd"; mkdir -p "$ctrd"
cat >"$ctrd/config.toml" <<TOML
version = 2
root = "$tree/var/lib/containerd"
state = "$ctrd/state"
disabled_plugins = ["io.containerd.grpc.v1.cri"]
[grpc]
  address = "$ctrd/containerd.sock"
TOML
containerd --config "$ctrd/config.toml" >"$ctrd/log" 2>&1 &
ctrd_pid=$!
trap 'kill $ctrd_pid 2>/dev/null || true' EXIT
for _ in $(seq 1 60); do ctr --address "$ctrd/containerd.sock" version >/dev/null 2>&1 && break; sleep 0.5; done
for t in "$work"/images/*.tar; do
  ctr --address "$ctrd/containerd.sock" -n k8s.io images import --no-unpack --digests "$t" >&2
done
kill "$ctrd_pid"; wait "$ctrd_pid" 2>/dev/null || true
trap - EXIT
awk -v s="$ctrd/state" '$2 ~ "^"s {print $2}' /proc/self/mounts | sort -r | xargs -r umount -l
rm -rf "$ctrd"

# 6. The image.
tar -C "$tree" --numeric-owner --xattrs -cf - . |
  docker import \
    --change 'ENV container=docker' \
    --change 'ENTRYPOINT ["/usr/local/bin/entrypoint", "/sbin/init"]' \
    - "$image-import" >/dev/null
# docker import takes no STOPSIGNAL; systemd as PID 1 stops on SIGRTMIN+3 (SIGTERM makes it
# re-execute). A one-line build on the local image (no pull) adds it.
printf 'FROM %s\nSTOPSIGNAL SIGRTMIN+3\n' "$image-import" | DOCKER_BUILDKIT=0 docker build -q -t "$image" - >/dev/null
docker rmi "$image-import" >/dev/null
rm -rf "$tree"
log "built $image in $((SECONDS - start))s"
echo "$image"
