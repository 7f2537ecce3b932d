// Package checks holds the tests that read evictiond's PromQL with Prometheus' own parser:
// every query of the Grafana dashboard and every rule expression of the alerts
// (charts/evictiond/files) parses and names only metrics evictiond exports (docs/metrics.md,
// which the daemon tier holds equal to a real agent's /metrics). They live in this tools
// module because it already requires github.com/prometheus/prometheus; the product module
// does not. Run by `make test-dashboard` (part of `make test`).
package checks
