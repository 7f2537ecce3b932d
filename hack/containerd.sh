#!/usr/bin/env bash
# containerd.sh — containerd 2.x (containerd, containerd-shim-runc-v2, ctr) built from the Go module
# proxy at a pinned release into a cache directory keyed by version, only when a binary is
# missing; prints that directory. Debian bookworm packages containerd 1.6 only, and the tiers that
# run a real runtime (CRI, monitor, daemon, e2e, the cgroup v2 node) prove containerd 2.x, what
# users run with a current kubelet. Static binaries (CGO_ENABLED=0: the btrfs snapshotter, the
# one cgo plugin, is left out; overlayfs and native are in). runc stays Debian's package.
#
#   EVICTIOND_CACHE     cache root (default /var/cache/evictiond)
#   CONTAINERD_VERSION  the release (default v2.2.9)
#
# A cold build takes 1-3 minutes on 2 cores; a warm run is a few stat calls.
set -euo pipefail

CONTAINERD_VERSION="${CONTAINERD_VERSION:-v2.2.9}"
CACHE="${EVICTIOND_CACHE:-/var/cache/evictiond}"
BIN_DIR="$CACHE/containerd/$CONTAINERD_VERSION/bin"
COMPONENTS=(containerd containerd-shim-runc-v2 ctr)

missing=()
for c in "${COMPONENTS[@]}"; do
	[[ -x "$BIN_DIR/$c" ]] || missing+=("$c")
done

if ((${#missing[@]} > 0)); then
	mkdir -p "$BIN_DIR"
	# Build into a temp dir in the same filesystem and rename, so an interrupted build never
	# leaves a half-written binary that a later run would trust.
	tmp="$(mktemp -d "$BIN_DIR/.build.XXXXXX")"
	trap 'rm -rf "$tmp"' EXIT
	echo "containerd: building ${missing[*]} $CONTAINERD_VERSION from the module proxy" >&2
	pkgs=()
	for c in "${missing[@]}"; do pkgs+=("github.com/containerd/containerd/v2/cmd/$c@$CONTAINERD_VERSION"); done
	# go install pkg@version builds with containerd's own go.mod (its pinned dependencies).
	(cd "$tmp" && GOBIN="$tmp" CGO_ENABLED=0 GOFLAGS=-mod=mod go install -trimpath \
		-ldflags="-s -w -X github.com/containerd/containerd/v2/version.Version=${CONTAINERD_VERSION#v}" \
		"${pkgs[@]}") >&2
	for c in "${missing[@]}"; do
		mv "$tmp/$c" "$BIN_DIR/$c"
	done
fi

echo "$BIN_DIR"
