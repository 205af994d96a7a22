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
# Packages whose service the project never runs as the machine's daemon: the tests start their
# own process (prometheus: e2e/prometheus_test.go, state in a temporary directory; frr: bgpd
# per test in its own netns).
no_service=(prometheus nftables frr)
installed() { dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q 'install ok installed'; }
if [ "$(id -u)" -ne 0 ]; then SUDO=sudo; else SUDO=; fi
# keep_stopped stops and disables the packaged services of no_service (with systemd or the
# sysvinit scripts); a no-op when they are not installed or already so.
keep_stopped() {
  for s in "${no_service[@]}"; do
    installed "$s" || continue
    if [ -d /run/systemd/system ]; then
      if systemctl is-enabled --quiet "$s" 2>/dev/null || systemctl is-active --quiet "$s" 2>/dev/null; then
        $SUDO systemctl disable --now "$s" >/dev/null 2>&1 && echo "deps: $s service stopped and disabled"
      fi
    elif [ -x "/etc/init.d/$s" ]; then
      if "/etc/init.d/$s" status >/dev/null 2>&1; then $SUDO "/etc/init.d/$s" stop >/dev/null 2>&1 || true; fi
      if ls /etc/rc[2-5].d/S*"$s" >/dev/null 2>&1; then $SUDO update-rc.d "$s" disable >/dev/null 2>&1 || true; fi
    fi
  done
}
missing=()
for p in "${pkgs[@]}"; do
  installed "$p" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  keep_stopped
  echo "deps: all ${#pkgs[@]} Debian packages present"
  exit 0
fi
echo "deps: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
# While installing, a policy-rc.d (invoke-rc.d and deb-systemd-invoke ask it) forbids starting
# the no_service services, unless the machine has its own policy (a container's usually
# forbids everything).
policy=/usr/sbin/policy-rc.d
if [ ! -e "$policy" ]; then
  $SUDO tee "$policy" >/dev/null <<POLICY
#!/bin/sh
# tools/install-deps.sh (removed after the install): never start these services.
case "\$1" in $(IFS='|'; echo "${no_service[*]}")) exit 101 ;; esac
exit 0
POLICY
  $SUDO chmod 755 "$policy"
  trap '$SUDO rm -f "$policy"' EXIT
fi
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
keep_stopped
echo "deps: installed ${#missing[@]} packages"
