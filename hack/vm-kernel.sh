#!/usr/bin/env bash
# vm-kernel.sh — Debian's stock amd64 kernel for the cgroup v2 VM tier (mk/cgroup2.mk), without
# installing it on this machine: the package is downloaded (apt-get download) and unpacked with
# dpkg-deb -x into a cache directory kept per package version, and the uncompressed vmlinux (which
# qemu boots through PVH, about 3 s faster than the bzImage) is extracted from it. Prints the path
# of vmlinux on stdout. Idempotent: a cached version is not downloaded again.
#
# VM_KERNEL_PACKAGE picks the package (default: what linux-image-amd64 depends on, i.e. the
# distribution's current kernel); EVICTIOND_CACHE is the cache root (default /var/cache/evictiond).
set -euo pipefail

cache="${EVICTIOND_CACHE:-/var/cache/evictiond}/vm-kernel"
log() { echo "vm-kernel: $*" >&2; }

resolve() {
	apt-cache depends linux-image-amd64 2>/dev/null | awk '/Depends: linux-image-[0-9]/ {print $2; exit}'
}

pkg="${VM_KERNEL_PACKAGE:-}"
if [ -z "$pkg" ]; then
	pkg="$(resolve)"
	if [ -z "$pkg" ]; then
		# A fresh machine has no package lists yet.
		if [ "$(id -u)" -ne 0 ]; then
			log "no package lists to resolve linux-image-amd64 and not root to run apt-get update"
			exit 1
		fi
		apt-get update -qq
		pkg="$(resolve)"
	fi
	if [ -z "$pkg" ]; then
		log "cannot resolve the kernel package linux-image-amd64 depends on (apt-cache depends linux-image-amd64)"
		exit 1
	fi
fi
version="$(apt-cache policy "$pkg" 2>/dev/null | awk '/Candidate:/ {print $2}')"
if [ -z "$version" ] || [ "$version" = "(none)" ]; then
	log "package $pkg has no installable version (apt-cache policy $pkg)"
	exit 1
fi

dir="$cache/$pkg/$version"
if [ -s "$dir/vmlinux" ]; then
	echo "$dir/vmlinux"
	exit 0
fi

mkdir -p "$cache"
tmp="$(mktemp -d "$cache/.tmp.XXXXXX")"
trap 'rm -rf "$tmp"' EXIT
log "downloading $pkg $version"
(cd "$tmp" && apt-get download -q "$pkg=$version" >&2)
deb="$(ls "$tmp"/*.deb)"
dpkg-deb -x "$deb" "$tmp/root"
vmlinuz="$(ls "$tmp"/root/boot/vmlinuz-* | head -n1)"
[ -f "$vmlinuz" ] || { log "no /boot/vmlinuz-* in $deb"; exit 1; }

# The bzImage carries the kernel as an xz stream: find its magic (FD 37 7A 58 5A 00) and
# decompress from there; what follows the stream is ignored.
offset="$(LC_ALL=C grep -obUaP '\xfd7zXZ\x00' "$vmlinuz" | head -n1 | cut -d: -f1)"
[ -n "$offset" ] || { log "no xz stream in $vmlinuz (kernel not xz-compressed?)"; exit 1; }
tail -c "+$((offset + 1))" "$vmlinuz" | xz -dc --single-stream > "$tmp/vmlinux" 2>/dev/null || true
if ! head -c 4 "$tmp/vmlinux" | grep -q 'ELF'; then
	log "extracting vmlinux from $vmlinuz at offset $offset did not give an ELF file"
	exit 1
fi

mkdir -p "$dir"
cp "$vmlinuz" "$dir/vmlinuz"
mv "$tmp/vmlinux" "$dir/vmlinux.part"
# Modules of the same build, for tests that need one (loop.ko gives real page cache).
if [ -d "$tmp/root/lib/modules" ]; then
	rm -rf "$dir/modules"
	mv "$tmp/root/lib/modules" "$dir/modules"
fi
mv "$dir/vmlinux.part" "$dir/vmlinux"
log "cached $pkg $version in $dir"
echo "$dir/vmlinux"
