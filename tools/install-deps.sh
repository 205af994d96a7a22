#!/usr/bin/env bash
# Installs what a fresh machine of the project's kind lacks, from Debian's packages only.
# Idempotent: does nothing (and never touches the network) when everything is present.
# Area-specific needs are listed in tools/deps/*.list (one Debian package per line).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
pkgs=(make git ca-certificates iproute2 iptables conntrack ethtool kmod procps psmisc util-linux)
for f in "$root"/tools/deps/*.list; do
  [ -f "$f" ] || continue
  while read -r p; do
    p=${p%%#*}; p=${p//[[:space:]]/}
    [ -n "$p" ] && pkgs+=("$p")
  done <"$f"
done
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  echo "deps: all ${#pkgs[@]} Debian packages present"
  exit 0
fi
echo "deps: installing ${missing[*]}"
if [ "$(id -u)" -ne 0 ]; then SUDO=sudo; else SUDO=; fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
echo "deps: installed ${#missing[@]} packages"
