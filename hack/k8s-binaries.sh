#!/usr/bin/env bash
# Builds kube-apiserver, kube-controller-manager, kube-scheduler and kubelet from the
# Go module proxy (tools module hack/tools/k8s) into a cache directory keyed by
# version, only when a binary is missing or does not report that version, and prints
# that directory. The version is stamped the way Kubernetes' own release build does
# (hack/lib/version.sh): without it every component reports v0.0.0-master, and a chart's
# kubeVersion constraint or a version-gated client cannot be tested against them.
#
#   EVICTIOND_CACHE  cache root (default /var/cache/evictiond)
#   K8S_VERSION      must match hack/tools/k8s/go.mod (default v1.35.4)
#
# A cold build takes several minutes (kube-apiserver alone ~6.5 min on 2 idle cores);
# a warm run is a few stat calls.
set -euo pipefail

K8S_VERSION="${K8S_VERSION:-v1.35.4}"
CACHE="${EVICTIOND_CACHE:-/var/cache/evictiond}"
BIN_DIR="$CACHE/k8s/$K8S_VERSION/bin"
TOOLS_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")/tools/k8s" && pwd)"
COMPONENTS=(kube-apiserver kube-controller-manager kube-scheduler kubelet)

if ! grep -q "k8s.io/kubernetes $K8S_VERSION" "$TOOLS_DIR/go.mod"; then
	echo "k8s-binaries: K8S_VERSION=$K8S_VERSION does not match $TOOLS_DIR/go.mod" >&2
	exit 1
fi

missing=()
for c in "${COMPONENTS[@]}"; do
	if [[ ! -x "$BIN_DIR/$c" ]] || [[ "$("$BIN_DIR/$c" --version 2>/dev/null)" != "Kubernetes $K8S_VERSION" ]]; then
		missing+=("$c")
	fi
done

major="${K8S_VERSION#v}"
minor="${major#*.}"
major="${major%%.*}"
minor="${minor%%.*}"
ldflags="-s -w"
for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
	ldflags+=" -X $pkg.gitVersion=$K8S_VERSION -X $pkg.gitMajor=$major -X $pkg.gitMinor=$minor"
	ldflags+=" -X $pkg.gitTreeState=clean -X $pkg.buildDate=1970-01-01T00:00:00Z"
done

if ((${#missing[@]} > 0)); then
	mkdir -p "$BIN_DIR"
	# Build into a temp dir in the same filesystem and rename, so an interrupted
	# build never leaves a half-written binary that a later run would trust.
	tmp="$(mktemp -d "$BIN_DIR/.build.XXXXXX")"
	trap 'rm -rf "$tmp"' EXIT
	echo "k8s-binaries: building ${missing[*]} $K8S_VERSION (slow on a cold cache)" >&2
	pkgs=()
	for c in "${missing[@]}"; do pkgs+=("./$c"); done
	# One go build for all: shared packages compile once and the links run in parallel.
	(cd "$TOOLS_DIR" && CGO_ENABLED=0 go build -mod=readonly -trimpath -ldflags="$ldflags" \
		-o "$tmp/" "${pkgs[@]}") >&2
	for c in "${missing[@]}"; do
		mv "$tmp/$c" "$BIN_DIR/$c"
	done
fi

echo "$BIN_DIR"
