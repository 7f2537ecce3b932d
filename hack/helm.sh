#!/usr/bin/env bash
# Builds the Helm CLI (v4) from the Go module proxy (tools module hack/tools/helm) into a
# cache directory keyed by version, only when missing; prints the binary's path.
# A cold build is about 4 CPU-minutes (~2 min on 2 idle cores); a warm run is a stat.
#
# Why Helm v4: v3 is past its end of support (security fixes ended 2026-11-11), v4 is the
# maintained line, and charts/evictiond (apiVersion v2) installs with either.
#
#   EVICTIOND_CACHE  cache root (default /var/cache/evictiond)
set -euo pipefail
HACK="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
source "$HACK/lib/go-tool.sh"
# `helm version` reports what upstream releases set at link time.
go_tool helm "$HACK/tools/helm" helm.sh/helm/v4 helm.sh/helm/v4/cmd/helm \
	-ldflags='-s -w -X helm.sh/helm/v4/internal/version.version={VERSION}'
