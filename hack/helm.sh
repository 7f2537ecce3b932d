#!/usr/bin/env bash
# Builds the Helm CLI (v4) from the Go module proxy (tools module hack/tools/helm) into a
# cache directory keyed by version, only when missing; prints the binary's path.
#
# Why Helm v4: v3 is past its end of support (security fixes ended 2026-11-11), v4 is the
# maintained line, and charts/evictiond (apiVersion v2) installs with either.
#
#   EVICTIOND_CACHE  cache root (default /var/cache/evictiond)
set -euo pipefail

CACHE="${EVICTIOND_CACHE:-/var/cache/evictiond}"
TOOLS_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")/tools/helm" && pwd)"
VERSION="$(awk '$1 == "helm.sh/helm/v4" || $2 == "helm.sh/helm/v4" {print $NF}' "$TOOLS_DIR/go.mod" | head -1)"
if [[ -z "$VERSION" ]]; then
	echo "helm: no helm.sh/helm/v4 requirement in $TOOLS_DIR/go.mod" >&2
	exit 1
fi
BIN_DIR="$CACHE/helm/$VERSION/bin"
BIN="$BIN_DIR/helm"

if [[ ! -x "$BIN" ]]; then
	mkdir -p "$BIN_DIR"
	# Build to a temp name in the same directory and rename: never a half-written binary.
	tmp="$(mktemp "$BIN_DIR/.build.XXXXXX")"
	trap 'rm -f "$tmp"' EXIT
	echo "helm: building $VERSION (about a minute or two on a cold cache)" >&2
	# The version Helm reports (helm version) is set at link time in upstream releases.
	(cd "$TOOLS_DIR" && CGO_ENABLED=0 go build -mod=readonly -trimpath \
		-ldflags="-s -w -X helm.sh/helm/v4/internal/version.version=$VERSION" \
		-o "$tmp" helm.sh/helm/v4/cmd/helm) >&2
	mv "$tmp" "$BIN"
fi

echo "$BIN"
