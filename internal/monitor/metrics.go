package monitor

import "github.com/prometheus/client_golang/prometheus"

// metrics count what could not be read. Labels are signal and stat names,
// never pod names.
type metrics struct {
	signalReadErrors *prometheus.CounterVec
	podReadErrors    *prometheus.CounterVec
	runtimeErrors    *prometheus.CounterVec
}

func newMetrics() *metrics {
	return &metrics{
		signalReadErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "evictiond", Subsystem: "monitor", Name: "signal_read_errors_total",
			Help: "Observations of a signal that could not be read and were reported missing.",
		}, []string{"signal"}),
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

func (m *metrics) collectors() []prometheus.Collector {
	return []prometheus.Collector{m.signalReadErrors, m.podReadErrors, m.runtimeErrors}
}
