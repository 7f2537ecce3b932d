#!/usr/bin/env bash
# node-v2-rootfs.sh — the Debian root filesystem of the cgroup v2 node VM (make test-node-v2):
# systemd as PID 1, dbus, runc, the CNI plugins, iproute2, nftables/iptables, kmod, procps,
# apparmor (apparmor_parser: containerd loads its default profile with it, and confines
# containers only when it exists; the kernel has AppArmor on by default), and the kernel
# modules a node needs (overlay, bridge, veth, br_netfilter, netfilter, virtio block,
# e1000, ext4) from the VM kernel hack/vm-kernel.sh unpacks. Built with mmdebstrap from the
# machine's own Debian mirror (read from its apt sources), trimmed (no docs, man pages, locales,
# apt lists), written as a tar, and cached per (this script, kernel) so a warm run is a stat.
# containerd 2.x, the kubelet, configuration and images are added per run by the test harness
# (internal/testenv/vm/node.go); nothing here is installed on this machine but mmdebstrap.
# Prints the tar's path.
#
#   EVICTIOND_CACHE  cache root (default /var/cache/evictiond)
set -euo pipefail

CACHE="${EVICTIOND_CACHE:-/var/cache/evictiond}"
SUITE=bookworm
PACKAGES=systemd,systemd-sysv,dbus,iproute2,kmod,procps,runc,containernetworking-plugins,nftables,iptables,apparmor
log() { echo "node-v2-rootfs: $*" >&2; }

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
vmlinux="$(EVICTIOND_CACHE="$CACHE" "$here/vm-kernel.sh")"
modtree="$(ls -d "$(dirname "$vmlinux")"/modules/*/ | head -n1)"
release="$(basename "$modtree")"
[ -d "$modtree/kernel" ] || { log "no kernel modules beside $vmlinux"; exit 1; }

key="$( (cat "${BASH_SOURCE[0]}"; echo "$release $vmlinux") | sha256sum | cut -c1-16)"
out="$CACHE/node-v2-rootfs/$key/rootfs.tar"
if [ -s "$out" ]; then
	echo "$out"
	exit 0
fi

"$here/install-deps.sh" mmdebstrap >&2
# The machine's Debian mirror, from its apt sources (deb822 or one-line form).
mirror="$(grep -hE '^(URIs:|deb )' /etc/apt/sources.list.d/*.sources /etc/apt/sources.list 2>/dev/null |
	grep -v security | head -n1 | sed -E 's/^URIs: *//; s/^deb +(\[[^]]*\] +)?//; s/ .*//' || true)"
[ -n "$mirror" ] || { log "no Debian mirror in /etc/apt/sources.list(.d)"; exit 1; }

mkdir -p "$(dirname "$out")"
tmp="$(mktemp -d "$(dirname "$out")/.build.XXXXXX")"
trap 'rm -rf "$tmp"' EXIT

# The modules a node needs, as whole subtrees so their dependencies come along (the package
# ships no modules.dep; depmod runs in the new root): overlayfs, bridge + br_netfilter, veth,
# netfilter (nftables and iptables-nft, as the CNI bridge plugin's masquerade uses), e1000 (qemu's
# user network), virtio block and ext4 (the node's disk).
subtrees=(fs/overlayfs fs/ext4 fs/jbd2 fs/mbcache.ko net/bridge net/802 net/llc net/netfilter net/ipv4/netfilter
	net/ipv6/netfilter drivers/net/veth.ko drivers/net/ethernet/intel/e1000 drivers/virtio drivers/block/virtio_blk.ko
	lib/crc16.ko lib/libcrc32c.ko crypto/crc32c_generic.ko)
modlist="$tmp/modules.txt"
for s in "${subtrees[@]}"; do
	[ -e "$modtree/kernel/$s" ] || { log "kernel/$s not in the modules of $release"; exit 1; }
	(cd "$modtree" && find "kernel/$s" -name '*.ko*') >> "$modlist"
done

log "building $SUITE ($PACKAGES) from $mirror, modules of $release"
mmdebstrap --variant=minbase --include="$PACKAGES" \
	--dpkgopt='path-exclude=/usr/share/doc/*' --dpkgopt='path-exclude=/usr/share/man/*' \
	--dpkgopt='path-exclude=/usr/share/locale/*' --dpkgopt='path-exclude=/usr/share/info/*' \
	--dpkgopt='path-exclude=/usr/lib/cni/{dhcp,vlan,macvlan,ipvlan,vrf,sbr,tap,dummy,bandwidth,tuning,firewall,static}' \
	--customize-hook="mkdir -p \"\$1/lib/modules/$release\" && cd '$modtree' && xargs -a '$modlist' cp --parents -t \"\$1/lib/modules/$release\" && cp modules.order modules.builtin modules.builtin.modinfo \"\$1/lib/modules/$release/\" && chroot \"\$1\" depmod -a $release" \
	--customize-hook='rm -rf "$1"/var/lib/apt/lists/* "$1"/var/cache/apt/* "$1"/var/cache/debconf/*-old "$1"/var/log/*.log' \
	"$SUITE" "$tmp/rootfs.tar" "deb $mirror $SUITE main" >&2
mv "$tmp/rootfs.tar" "$out"
log "cached in $out ($(du -h "$out" | cut -f1))"
echo "$out"
