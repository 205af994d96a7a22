#!/bin/sh
# Every kubelet sets six machine-global kernel settings at start (pkg/kubelet/cm
# setupKernelTunables: vm.overcommit_memory=1, kernel.panic=10, kernel.panic_on_oops=1,
# ...). A kind node is a privileged container with a writable /proc/sys that these are not
# namespaced in, so the kubelet would rewrite the host's (and panic_on_oops=1 turns any oops
# on a shared machine into a reboot). The kubelet only writes a value that differs from
# what it reads: bind-mount a file holding the kubelet's value over each differing entry,
# in this node's mount namespace only. The host's settings stay as they are.
set -eu
dir=/run/staticip-kernel-defaults
mkdir -p "$dir"
for kv in vm/overcommit_memory=1 vm/panic_on_oom=0 kernel/panic=10 kernel/panic_on_oops=1 \
          kernel/keys/root_maxkeys=1000000 kernel/keys/root_maxbytes=25000000; do
  name=${kv%%=*} want=${kv#*=}
  [ "$(cat "/proc/sys/$name")" = "$want" ] && continue
  file="$dir/$(echo "$name" | tr / .)"
  echo "$want" >"$file"
  mount --bind "$file" "/proc/sys/$name"
  echo "staticip-kernel-defaults: /proc/sys/$name reads $want in this node (host unchanged)"
done
