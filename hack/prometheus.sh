#!/usr/bin/env bash
# Builds the Prometheus server the e2e tier's Prometheus scenario runs, from the Go module
# proxy (tools module hack/tools/prometheus), with only Kubernetes service discovery, into a
# cache directory keyed by version, only when missing; prints the binary's path.
#
# Why not Debian's package: it is built without Kubernetes service discovery
# (its discovery/ has no kubernetes), which the scenario exists to exercise.
#
#   EVICTIOND_CACHE  cache root (default /var/cache/evictiond)
set -euo pipefail

CACHE="${EVICTIOND_CACHE:-/var/cache/evictiond}"
TOOLS_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")/tools/prometheus" && pwd)"
VERSION="$(awk '$1 == "github.com/prometheus/prometheus" {print $2}' "$TOOLS_DIR/go.mod")"
if [[ -z "$VERSION" ]]; then
	echo "prometheus: no github.com/prometheus/prometheus requirement in $TOOLS_DIR/go.mod" >&2
	exit 1
fi
BIN_DIR="$CACHE/prometheus/$VERSION/bin"
BIN="$BIN_DIR/prometheus"

if [[ ! -x "$BIN" ]]; then
	mkdir -p "$BIN_DIR"
	# Build to a temp name in the same directory and rename: never a half-written binary.
	tmp="$(mktemp "$BIN_DIR/.build.XXXXXX")"
	trap 'rm -f "$tmp"' EXIT
	echo "prometheus: building $VERSION with Kubernetes service discovery only (slow on a cold cache)" >&2
	(cd "$TOOLS_DIR" && CGO_ENABLED=0 go build -mod=readonly -trimpath -ldflags='-s -w' \
		-tags remove_all_sd,enable_kubernetes_sd -o "$tmp" github.com/prometheus/prometheus/cmd/prometheus) >&2
	mv "$tmp" "$BIN"
fi

echo "$BIN"
