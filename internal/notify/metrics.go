package notify

import "github.com/prometheus/client_golang/prometheus"

// Fallback reasons (metric label values, a closed set).
const (
	ReasonUnsupported = "unsupported" // the kernel or hierarchy has no such notifier
	ReasonNotFound    = "not_found"   // the cgroup or file is missing (not created yet, or removed)
	ReasonArmFailed   = "arm_failed"  // arming returned another error
	ReasonFailed      = "failed"      // an armed notifier reported an error later
	ReasonNoLimit     = "no_limit"    // the memcg has no memory limit to measure against
)

// Metrics are the fast path's Prometheus collectors. The daemon registers
// Collectors(); a nil *Metrics records nothing.
type Metrics struct {
	// Wakes counts notifications delivered to the loop, before coalescing.
	Wakes *prometheus.CounterVec
	// Fallbacks counts notifiers that could not be armed or failed.
	Fallbacks *prometheus.CounterVec
	// Armed is 1 for each notifier currently armed, 0 otherwise.
	Armed *prometheus.GaugeVec
	// Rearms counts memcg thresholds moved as inactive_file drifted.
	Rearms prometheus.Counter
	// PollActive is 1 while the fast poll runs.
	PollActive prometheus.Gauge
	// PollErrors counts failed reads of the memory and PID signals by the poll.
	PollErrors prometheus.Counter
	// PollReads counts the poll's reads; their rate shows its pacing.
	PollReads prometheus.Counter
}

// NewMetrics creates the collectors, unregistered.
func NewMetrics() *Metrics {
	return &Metrics{
		Wakes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "evictiond_notifier_wakes_total",
			Help: "Notifications that woke the decision loop, by notifier (before coalescing).",
		}, []string{"notifier"}),
		Fallbacks: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "evictiond_notifier_fallback_total",
			Help: "Notifiers that could not be armed or failed and were replaced by the fast poll, by notifier and reason.",
		}, []string{"notifier", "reason"}),
		Armed: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "evictiond_notifier_armed",
			Help: "1 when the notifier is armed in the kernel, 0 when it is disabled or replaced by the poll.",
		}, []string{"notifier", "target"}),
		Rearms: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "evictiond_notifier_memcg_rearms_total",
			Help: "Memcg thresholds moved because inactive_file or capacity changed.",
		}),
		PollActive: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "evictiond_notifier_poll_active",
			Help: "1 while the fast poll of the memory and PID signals runs.",
		}),
		PollErrors: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "evictiond_notifier_poll_errors_total",
			Help: "Failed reads of the memory and PID signals by the fast poll.",
		}),
		PollReads: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "evictiond_notifier_poll_reads_total",
			Help: "Reads of the memory and PID signals by the fast poll; their rate shows its pacing (10/s at a 100ms pollInterval, up to 200/s near a threshold).",
		}),
	}
}

// Collectors lists the collectors for registration.
func (m *Metrics) Collectors() []prometheus.Collector {
	return []prometheus.Collector{m.Wakes, m.Fallbacks, m.Armed, m.Rearms, m.PollActive, m.PollErrors, m.PollReads}
}

func (m *Metrics) wake(src Source) {
	if m != nil {
		m.Wakes.WithLabelValues(string(src)).Inc()
	}
}

func (m *Metrics) fallback(src Source, reason string) {
	if m != nil {
		m.Fallbacks.WithLabelValues(string(src), reason).Inc()
	}
}

func (m *Metrics) armed(src Source, target string, armed bool) {
	if m == nil {
		return
	}
	v := 0.0
	if armed {
		v = 1
	}
	m.Armed.WithLabelValues(string(src), target).Set(v)
}

func (m *Metrics) rearm() {
	if m != nil {
		m.Rearms.Inc()
	}
}

func (m *Metrics) pollActive(active bool) {
	if m == nil {
		return
	}
	v := 0.0
	if active {
		v = 1
	}
	m.PollActive.Set(v)
}

func (m *Metrics) pollRead() {
	if m != nil {
		m.PollReads.Inc()
	}
}

func (m *Metrics) pollError() {
	if m != nil {
		m.PollErrors.Inc()
	}
}
