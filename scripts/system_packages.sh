#!/usr/bin/env bash
# Debian packages the nemesis group needs (`make nemesis`): iproute2 (network namespaces, veth,
# bridges) and nftables (partitions, packet loss). Installed when
# missing, as root; otherwise one line saying what to install, exit 1.
set -euo pipefail
need=()
command -v ip >/dev/null || need+=(iproute2)
command -v nft >/dev/null || need+=(nftables)
[ ${#need[@]} -eq 0 ] && exit 0
if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null; then
    echo "make nemesis needs root and the Debian packages: ${need[*]}" >&2
    exit 1
fi
echo "installing ${need[*]} (apt-get)"
DEBIAN_FRONTEND=noninteractive apt-get install -y -q "${need[@]}" >/dev/null 2>&1 || {
    apt-get update -q >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -q "${need[@]}" >/dev/null; }
