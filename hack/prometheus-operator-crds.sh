#!/usr/bin/env bash
# Fetches the Prometheus Operator's CRDs (monitoring.coreos.com: ServiceMonitor, PodMonitor,
# PrometheusRule, ...) from the Go module proxy, as the module github.com/prometheus-operator/
# prometheus-operator ships them in example/prometheus-operator-crd, and prints that directory.
# The module cache is the cache (verified against the checksum database); nothing is built.
# The daemon tier installs them in its API server to dry-run the chart's monitoring objects.
#
#   PROMETHEUS_OPERATOR_VERSION  default below
set -euo pipefail

VERSION="${PROMETHEUS_OPERATOR_VERSION:-v0.85.0}"
MODULE=github.com/prometheus-operator/prometheus-operator
dir="$(cd "${TMPDIR:-/tmp}" && GOFLAGS=-mod=mod go mod download -json "$MODULE@$VERSION" |
	awk -F'"' '$2 == "Dir" {print $4}')"
crds="$dir/example/prometheus-operator-crd"
if [[ ! -f "$crds/monitoring.coreos.com_servicemonitors.yaml" ]]; then
	echo "prometheus-operator-crds: $MODULE@$VERSION has no $crds/monitoring.coreos.com_servicemonitors.yaml" >&2
	exit 1
fi
echo "$crds"
