#!/bin/sh
# Where this node's capability bounding set lacks capabilities (the hosts of this project
# have no CAP_SYS_RESOURCE), privileged pods fail in runc ("unable to apply caps") and so
# does any oom_score_adj below containerd's own. Read the set from /proc (never assume):
# when it lacks something, make containerd's runc runtimes use runc-capfix (it drops exactly
# the missing capabilities from each spec, then execs runc) and restrict oom_score_adj.
# With a full set the config is left as kind wrote it.
set -eu
config=/etc/containerd/config.toml
bnd=$(awk '/^CapBnd:/ {print $2}' /proc/self/status)
last=$(cat /proc/sys/kernel/cap_last_cap)
full=$(printf '%x' $(( (1 << (last + 1)) - 1 )))
if [ "$(printf '%x' "0x$bnd")" = "$full" ]; then
  exit 0
fi
echo "staticip-capfix: CapBnd $bnd lacks capabilities: runc-capfix, restrict_oom_score_adj"
sed -i 's/^\(\s*\)restrict_oom_score_adj = false/\1restrict_oom_score_adj = true/' "$config"
if ! grep -q 'BinaryName = "/usr/local/sbin/runc-capfix"' "$config"; then
  sed -i 's|^\(\s*\)SystemdCgroup = true|\1SystemdCgroup = true\n\1BinaryName = "/usr/local/sbin/runc-capfix"|' "$config"
fi
