//go:build tools

// Package tools pins the Prometheus server this module builds.
package tools

import _ "github.com/prometheus/prometheus/cmd/prometheus"
