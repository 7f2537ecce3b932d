package monitor

import "github.com/prometheus/client_golang/prometheus"

// metrics count what could not be read. Labels are signal and stat names,
// never pod names.
type metrics struct {
	signalReadErrors *prometheus.CounterVec
	podReadErrors    *prometheus.CounterVec
	runtimeErrors    *prometheus.CounterVec
}

// newMetrics makes the monitor's counters. signalErrors, when given, is the
// daemon's evictiond_observation_errors_total{signal} (internal/metrics), so
// the monitor counts into it instead of a counter of its own.
func newMetrics(signalErrors *prometheus.CounterVec) *metrics {
	if signalErrors == nil {
		signalErrors = prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "evictiond", Name: "observation_errors_total",
			Help: "Signal readings that failed and were reported missing (never guessed), by signal.",
		}, []string{"signal"})
	}
	return &metrics{
		signalReadErrors: signalErrors,
		podReadErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "evictiond", Subsystem: "monitor", Name: "pod_stat_read_errors_total",
			Help: "Per-pod readings that could not be read and were reported missing, by stat.",
		}, []string{"stat"}),
		runtimeErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "evictiond", Subsystem: "monitor", Name: "runtime_errors_total",
			Help: "Failed CRI calls of the monitor, by call.",
		}, []string{"call"}),
	}
}

// collectors are the counters for the daemon to register: the signal error
// counter only when the monitor made it.
func (m *metrics) collectors(ownSignalErrors bool) []prometheus.Collector {
	out := []prometheus.Collector{m.podReadErrors, m.runtimeErrors}
	if ownSignalErrors {
		out = append(out, m.signalReadErrors)
	}
	return out
}
