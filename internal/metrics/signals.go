package metrics

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/evictiond/evictiond/internal/policy"
)

// A metric family carries one unit (Prometheus' naming guide), so the
// signals' readings and thresholds are split by the unit their signal has in
// policy's registry (policy.Signal.Unit): every signal lands in exactly one
// family of each kind.
type unitFamilies struct {
	// reading is the available amount, or for PSI the stalled share.
	reading *prometheus.GaugeVec
	// capacity is nil for the stall ratio, whose capacity is 1.
	capacity  *prometheus.GaugeVec
	threshold *prometheus.GaugeVec
}

// unitNames are the families' names and what they hold, by unit.
var unitNames = []struct {
	unit                         policy.Unit
	reading, capacity, threshold string
	what                         string
}{
	{policy.UnitBytes, "signal_available_bytes", "signal_capacity_bytes", "threshold_bytes", "memory and filesystem signals, in bytes"},
	{policy.UnitInodes, "signal_available_inodes", "signal_capacity_inodes", "threshold_inodes", "inode signals (*.inodesFree)"},
	{policy.UnitPIDs, "signal_available_pids", "signal_capacity_pids", "threshold_pids", "pid.available"},
	{policy.UnitStallRatio, "signal_stalled_ratio", "", "threshold_stalled_ratio", "PSI signals, as the share of time stalled (0-1)"},
}

func newUnitFamilies() map[policy.Unit]unitFamilies {
	out := map[policy.Unit]unitFamilies{}
	for _, n := range unitNames {
		f := unitFamilies{}
		if n.capacity == "" {
			f.reading = prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: namespace, Name: n.reading,
				Help: "Last observed stall of the " + n.what + "; absent while the signal cannot be read."}, []string{"signal"})
			f.threshold = prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: namespace, Name: n.threshold,
				Help: "Eviction threshold of the " + n.what + ": met while the stall is above it."}, []string{"signal", "kind"})
		} else {
			f.reading = prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: namespace, Name: n.reading,
				Help: "Last observed available amount of the " + n.what + "; absent while the signal cannot be read."}, []string{"signal"})
			f.capacity = prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: namespace, Name: n.capacity,
				Help: "Last observed capacity of the " + n.what + "."}, []string{"signal"})
			f.threshold = prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: namespace, Name: n.threshold,
				Help: "Eviction threshold of the " + n.what + ", resolved against the capacity: met while the available amount is below it."}, []string{"signal", "kind"})
		}
		out[n.unit] = f
	}
	return out
}

func (f unitFamilies) collectors() []prometheus.Collector {
	out := []prometheus.Collector{f.reading, f.threshold}
	if f.capacity != nil {
		out = append(out, f.capacity)
	}
	return out
}

// legacyFamilies are the families of one unit per signal that evictiond
// exported before the split (--legacy-signal-metrics, for one release):
// amounts as the engine carries them, PSI as PSIScale headroom.
type legacyFamilies struct {
	available, capacity, threshold *prometheus.GaugeVec
}

const legacyHelp = " Deprecated: replaced by the families of one unit (docs/metrics.md); exported only with --legacy-signal-metrics, removed in the next release."

func newLegacyFamilies() *legacyFamilies {
	return &legacyFamilies{
		available: prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: namespace, Name: "signal_available",
			Help: "Last observed available amount of an eviction signal, in its unit (bytes, inodes, PIDs; PSI: 10000 minus stall in hundredths of a percent)." + legacyHelp}, []string{"signal"}),
		capacity: prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: namespace, Name: "signal_capacity",
			Help: "Last observed capacity of an eviction signal, in its unit." + legacyHelp}, []string{"signal"}),
		threshold: prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: namespace, Name: "threshold",
			Help: "Eviction threshold resolved against the signal's capacity, in the signal's unit." + legacyHelp}, []string{"signal", "kind"}),
	}
}

// SetSignal exports a signal's reading in its unit's families.
func (m *Metrics) SetSignal(sig policy.Signal, o policy.Observation) {
	f, ok := m.signals[sig.Unit()]
	if !ok {
		return // not a signal of the registry
	}
	f.reading.WithLabelValues(string(sig)).Set(sig.InUnit(o.Available))
	if f.capacity != nil {
		f.capacity.WithLabelValues(string(sig)).Set(sig.InUnit(o.Capacity))
	}
	if l := m.legacy; l != nil {
		l.available.WithLabelValues(string(sig)).Set(float64(o.Available))
		l.capacity.WithLabelValues(string(sig)).Set(float64(o.Capacity))
	}
}

// DeleteSignal drops a signal that could not be read: a missing reading is
// absent, never a stale or guessed value.
func (m *Metrics) DeleteSignal(sig policy.Signal) {
	if f, ok := m.signals[sig.Unit()]; ok {
		f.reading.DeleteLabelValues(string(sig))
		if f.capacity != nil {
			f.capacity.DeleteLabelValues(string(sig))
		}
	}
	if l := m.legacy; l != nil {
		l.available.DeleteLabelValues(string(sig))
		l.capacity.DeleteLabelValues(string(sig))
	}
}

// SetThreshold exports a threshold of kind (hard, soft) resolved against its
// signal's capacity, as the engine carries it (policy.ThresholdValue.Resolve).
func (m *Metrics) SetThreshold(sig policy.Signal, kind string, resolved int64) {
	f, ok := m.signals[sig.Unit()]
	if !ok {
		return
	}
	f.threshold.WithLabelValues(string(sig), kind).Set(sig.InUnit(resolved))
	if l := m.legacy; l != nil {
		l.threshold.WithLabelValues(string(sig), kind).Set(float64(resolved))
	}
}

// ResetThresholds drops every threshold gauge (a new configuration's
// thresholds replace the previous ones).
func (m *Metrics) ResetThresholds() {
	for _, f := range m.signals {
		f.threshold.Reset()
	}
	if l := m.legacy; l != nil {
		l.threshold.Reset()
	}
}
