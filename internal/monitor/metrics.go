package monitor

import (
	"strconv"

	"github.com/prometheus/client_golang/prometheus"
)

// metrics count what could not be read. Labels are signal and stat names,
// never pod names.
type metrics struct {
	signalReadErrors *prometheus.CounterVec
	podReadErrors    *prometheus.CounterVec
	runtimeErrors    *prometheus.CounterVec
	nodeInfo         *prometheus.GaugeVec
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
		nodeInfo: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: "evictiond", Name: "node_info",
			Help: "1, labelled with the node as detected: cgroup version, cgroup driver and how it was found, the kubepods cgroup and whether it exists yet, the CRI runtime and how its socket was chosen.",
		}, []string{"cgroup_version", "cgroup_driver", "cgroup_driver_from", "kubepods", "kubepods_found", "runtime", "runtime_from"}),
	}
}

// setNodeInfo replaces the one node_info series.
func (m *metrics) setNodeInfo(i CgroupInfo, rt RuntimeEndpoint) {
	m.nodeInfo.Reset()
	runtime, from := rt.Runtime, rt.From
	if runtime == "" {
		runtime, from = "none", "none"
	}
	m.nodeInfo.WithLabelValues(strconv.Itoa(int(i.Version)), string(i.Driver), i.DriverFrom, i.Kubepods,
		strconv.FormatBool(i.KubepodsFound), runtime, from).Set(1)
}

// collectors are the counters for the daemon to register: the signal error
// counter only when the monitor made it.
func (m *metrics) collectors(ownSignalErrors bool) []prometheus.Collector {
	out := []prometheus.Collector{m.podReadErrors, m.runtimeErrors, m.nodeInfo}
	if ownSignalErrors {
		out = append(out, m.signalReadErrors)
	}
	return out
}
