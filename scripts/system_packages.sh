#!/usr/bin/env bash
# Debian packages a make target needs, installed when missing (as root, apt-get); otherwise
# one line saying what to install, exit 1.
#   bash scripts/system_packages.sh                 # make nemesis: iproute2 (network
#                                                   # namespaces, veth, bridges), nftables
#                                                   # (partitions, packet loss), iptables
#                                                   # and libnetfilter-queue-dev (link delay
#                                                   # without netem: the NFQUEUE delayer)
#   bash scripts/system_packages.sh prometheus      # make test: promtool (the alert rules'
#                                                   # tests) and prometheus (local up --prometheus)
# A package counts as present when every command named below for it is on PATH (or, for a
# path, when that file exists).
set -euo pipefail
declare -A commands_of=([iproute2]=ip [nftables]=nft [prometheus]="promtool prometheus"
    [iptables]=iptables
    [libnetfilter-queue-dev]=/usr/include/libnetfilter_queue/libnetfilter_queue.h)
wanted=("$@")
[ ${#wanted[@]} -eq 0 ] && wanted=(iproute2 nftables iptables libnetfilter-queue-dev)
need=()
for pkg in "${wanted[@]}"; do
    for cmd in ${commands_of[$pkg]:-$pkg}; do
        if [[ $cmd == /* ]]; then
            [ -e "$cmd" ] || { need+=("$pkg"); break; }
        else
            command -v "$cmd" >/dev/null || { need+=("$pkg"); break; }
        fi
    done
done
[ ${#need[@]} -eq 0 ] && exit 0
if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null; then
    echo "this needs root and the Debian packages: ${need[*]} (apt-get install ${need[*]})" >&2
    exit 1
fi
echo "installing ${need[*]} (apt-get)"
install() {
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${need[@]}" \
        >/dev/null 2>&1
}
install || { apt-get update -q >/dev/null && install; }
