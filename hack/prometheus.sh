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
HACK="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
source "$HACK/lib/go-tool.sh"
go_tool prometheus "$HACK/tools/prometheus" github.com/prometheus/prometheus github.com/prometheus/prometheus/cmd/prometheus \
	-ldflags='-s -w' -tags remove_all_sd,enable_kubernetes_sd
