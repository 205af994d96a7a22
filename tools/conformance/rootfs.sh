#!/usr/bin/env bash
# A minimal Debian userland for the agnhost and glibc-dns-testing images: the suite runs
# sh, curl, nc, dig, getent, awk, ip, ps inside them. Cached by suite and package list
# under $CONFORMANCE_CACHE (default ~/.cache/staticip-conformance); prints its directory.
set -euo pipefail
cache=${CONFORMANCE_CACHE:-$HOME/.cache/staticip-conformance}
suite=bookworm
mirror=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
packages=curl,netcat-openbsd,bind9-dnsutils,iproute2,procps,ca-certificates,busybox-static
key=$(echo "$suite $packages" | sha256sum | cut -c1-12)
rootfs="$cache/rootfs-$key"
if [ ! -e "$rootfs/.complete" ]; then
  mkdir -p "$cache"
  echo "conformance: debootstrap $suite minbase + $packages ..." >&2
  start=$SECONDS
  rm -rf "$rootfs.tmp"
  debootstrap --variant=minbase --include="$packages" "$suite" "$rootfs.tmp" "$mirror" >"$cache/debootstrap.log" 2>&1 ||
    { tail -20 "$cache/debootstrap.log" >&2; exit 1; }
  rm -rf "$rootfs.tmp/var/cache/apt/archives"/*.deb "$rootfs.tmp/var/lib/apt/lists"/*
  touch "$rootfs.tmp/.complete"
  rm -rf "$rootfs"; mv "$rootfs.tmp" "$rootfs"
  echo "conformance: rootfs in $((SECONDS - start))s" >&2
fi
echo "$rootfs"
