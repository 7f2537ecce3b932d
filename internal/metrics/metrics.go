// Package metrics defines evictiond's Prometheus metrics. Label values are
// bounded sets (signals, conditions, results, steps, notifiers): never pod
// names, so cardinality stays flat however many pods come and go.
package metrics

import (
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/evictiond/evictiond/internal/policy"
	"github.com/evictiond/evictiond/internal/version"
)

const namespace = "evictiond"

// Metrics are the agent's instruments.
type Metrics struct {
	Registry *prometheus.Registry

	// signals are the readings and thresholds by unit (SetSignal,
	// SetThreshold); legacy the families of mixed units, nil unless
	// Options.LegacySignalFamilies.
	signals map[policy.Unit]unitFamilies
	legacy  *legacyFamilies

	ThresholdMet  *prometheus.GaugeVec
	NodeCondition *prometheus.GaugeVec

	Evictions    *prometheus.CounterVec
	ReclaimBytes *prometheus.CounterVec
	ReclaimRuns  *prometheus.CounterVec

	MemoryReclaimBytes            *prometheus.CounterVec
	MemoryReclaimRequests         *prometheus.CounterVec
	MemoryReclaimEvictionsAvoided *prometheus.CounterVec

	PodPressureSelfInflicted      prometheus.Gauge
	PodPressureSelfInflictedTotal prometheus.Counter
	PodMemoryLivelocked           prometheus.Gauge
	PodMemoryLivelocksTotal       prometheus.Counter
	PodMemoryLivelockRestarts     *prometheus.CounterVec
	LoopWakeups                   *prometheus.CounterVec
	PassDuration                  prometheus.Histogram
	LastPass                      prometheus.Gauge
	StatsAge                      *prometheus.HistogramVec
	ObservationErr                *prometheus.CounterVec

	BrakeTotal            *prometheus.CounterVec
	BrakeCrossingToFrozen *prometheus.HistogramVec
	BrakeCrossingToFreed  *prometheus.HistogramVec
	BrakeEvictionPath     prometheus.Gauge

	LoopEvictions *prometheus.CounterVec
	LoopWorkloads *prometheus.GaugeVec

	// EventsDropped counts Events not written (kube.EventDrop* reasons).
	EventsDropped *prometheus.CounterVec

	ConfigReloads              *prometheus.CounterVec
	ConfigLastReloadSuccessful prometheus.Gauge
	ConfigLastReloadTime       prometheus.Gauge

	BuildInfo prometheus.Gauge
	// Confinement is 1 per control (internal/confine) in force.
	Confinement *prometheus.GaugeVec
}

// Options change what New exports.
type Options struct {
	// LegacySignalFamilies also exports evictiond_signal_available,
	// evictiond_signal_capacity and evictiond_threshold, which mix units
	// (run --legacy-signal-metrics; one release, for dashboards not yet moved).
	LegacySignalFamilies bool
}

// New creates the metrics on a fresh registry, with the process and Go
// runtime collectors.
func New() *Metrics { return NewWithOptions(Options{}) }

// NewWithOptions is New with o.
func NewWithOptions(o Options) *Metrics {
	r := prometheus.NewRegistry()
	m := &Metrics{
		Registry: r,
		signals:  newUnitFamilies(),
		ThresholdMet: prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: namespace, Name: "threshold_met",
			Help: "1 while an eviction threshold is met (grace periods ignored, minimum reclaim included)."}, []string{"signal", "kind"}),
		NodeCondition: prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: namespace, Name: "node_condition",
			Help: "1 while evictiond reports a node pressure condition (transition period included)."}, []string{"condition"}),
		Evictions: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: namespace, Name: "evictions_total",
			Help: "Pod eviction attempts by signal and result (evicted, deleted, dry_run, pdb_blocked, gone, throttled, rate_limited, cooling_down, api_error, stopped_locally, no_candidates)."}, []string{"signal", "result"}),
		ReclaimBytes: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: namespace, Name: "reclaim_bytes_total",
			Help: "Bytes freed by node-level reclaim, measured by statfs before and after, by step."}, []string{"step"}),
		ReclaimRuns: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: namespace, Name: "reclaim_runs_total",
			Help: "Node-level reclaim runs by step and result (ok, error, dry_run)."}, []string{"step", "result"}),
		MemoryReclaimBytes: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: namespace, Name: "memory_reclaim_bytes_total",
			Help: "Bytes pods gave back to reclaim before evict (memory.reclaim; each pod's memory.current before less after), by the memory signal that was near its threshold."}, []string{"signal"}),
		MemoryReclaimRequests: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: namespace, Name: "memory_reclaim_requests_total",
			Help: "Writes to pods' memory.reclaim by result (ok, partial: less freed than asked, error, unsupported, dry_run)."}, []string{"result"}),
		MemoryReclaimEvictionsAvoided: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: namespace, Name: "memory_reclaim_evictions_avoided_total",
			Help: "Passes where a hard memory threshold was met before reclaim before evict and none after it, so no pod was evicted, by signal."}, []string{"signal"}),
		PodPressureSelfInflicted: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: namespace, Name: "pod_memory_pressure_self_inflicted",
			Help: "Pods stalled on memory against their own limit now (memory.pressure some avg10 at or above podPressure.stall, at 90% of memory.max or more) while no memory threshold of the node is met."}),
		PodPressureSelfInflictedTotal: prometheus.NewCounter(prometheus.CounterOpts{Namespace: namespace, Name: "pod_memory_pressure_self_inflicted_total",
			Help: "Episodes of a pod stalled on memory against its own limit (each also a SelfInflictedMemoryPressure Event on the pod)."}),
		PodMemoryLivelocked: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: namespace, Name: "pod_memory_livelocked",
			Help: "Pods livelocked at their memory limit now: at 90% of memory.max or more, memory.pressure full avg10 at or above livelock.fullStall for livelock.window, no OOM kill meanwhile."}),
		PodMemoryLivelocksTotal: prometheus.NewCounter(prometheus.CounterOpts{Namespace: namespace, Name: "pod_memory_livelocks_total",
			Help: "Episodes of a pod livelocked at its memory limit (each also a MemoryLivelock Event on the pod)."}),
		PodMemoryLivelockRestarts: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: namespace, Name: "pod_memory_livelock_restarts_total",
			Help: "Restarts of livelocked pods (livelock.restart) by action (evict, kill) and outcome (the eviction outcomes; killed, kill_failed)."}, []string{"action", "outcome"}),
		LoopWakeups: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: namespace, Name: "loop_wakeups_total",
			Help: "Decision loop passes by what woke the loop (ticker, notifier, config)."}, []string{"source"}),
		PassDuration: prometheus.NewHistogram(prometheus.HistogramOpts{Namespace: namespace, Name: "pass_duration_seconds",
			Help:    "Duration of one decision pass (refresh, decide, reclaim, evict).",
			Buckets: prometheus.ExponentialBuckets(0.0001, 4, 10)}),
		LastPass: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: namespace, Name: "last_pass_timestamp_seconds",
			Help: "Unix time the last decision pass ended (every loop interval, and on every notifier wake-up); a loop that stops deciding stops moving it."}),
		StatsAge: prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: namespace, Name: "stats_age_seconds",
			Help:    "Age of the observation an eviction decision was made on, by signal.",
			Buckets: []float64{0.001, 0.01, 0.05, 0.1, 0.5, 1, 2, 5, 10, 30}}, []string{"signal"}),
		ObservationErr: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: namespace, Name: "observation_errors_total",
			Help: "Signal readings that failed and were reported missing (never guessed), by signal."}, []string{"signal"}),
		BrakeTotal: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: namespace, Name: "brake_total",
			Help: "Brake actions by signal and result: killed (frozen, eviction accepted, killed on the node), killed_locally (API unreachable: killed before the CRI stop), held (eviction not answered: stays frozen up to brake.maxFreeze), thawed_refused (eviction refused or not made), thawed_cleared (pressure cleared), thawed_expired (brake.maxFreeze elapsed), freeze_failed, kill_failed, dry_run."}, []string{"signal", "result"}),
		BrakeCrossingToFrozen: prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: namespace, Name: "brake_crossing_to_frozen_seconds",
			Help:    "Time from the hard threshold's crossing (its first reading below) to the victim's cgroup frozen, by signal.",
			Buckets: []float64{0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1, 2}}, []string{"signal"}),
		BrakeCrossingToFreed: prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: namespace, Name: "brake_crossing_to_freed_seconds",
			Help:    "Time from the hard threshold's crossing to the braked victim's last task gone (its memory, PIDs and open files released), by signal.",
			Buckets: []float64{0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1, 2, 5, 10}}, []string{"signal"}),
		BrakeEvictionPath: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: namespace, Name: "brake_eviction_path_seconds",
			Help: "How long the normal eviction path takes on this node (eviction accepted -> pod gone; moving estimate of hard evictions, or brake.evictionPath), which the brake compares the time to exhaustion with."}),
		LoopEvictions: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: namespace, Name: "eviction_loop_evictions_total",
			Help: "Evictions of a workload already in an eviction loop on this node (the loop's first included), by workload kind (Deployment, ReplicaSet, StatefulSet, Job, Pod, other)."}, []string{"kind"}),
		LoopWorkloads: prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: namespace, Name: "eviction_loop_workloads",
			Help: "Workloads in an eviction loop on this node whose backoff holds the node's pressure condition now, by workload kind."}, []string{"kind"}),
		EventsDropped: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: namespace, Name: "events_dropped_total",
			Help: "Events not written to the API server, by reason (queue_full: more than 1000 waiting; spam: too many about one object, 25 then one per 5 minutes; write_failed: rejected, or 12 tries failed; invalid; shutdown: not written by the 3 s flush at exit)."}, []string{"reason"}),
		ConfigReloads: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: namespace, Name: "config_reloads_total",
			Help: "Configuration reloads by result (success, rejected)."}, []string{"result"}),
		ConfigLastReloadSuccessful: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: namespace, Name: "config_last_reload_successful",
			Help: "1 if the last configuration reload was applied, 0 if the file was rejected and the previous configuration stays in force."}),
		ConfigLastReloadTime: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: namespace, Name: "config_last_reload_success_timestamp_seconds",
			Help: "Unix time of the last configuration applied."}),
		BuildInfo: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: namespace, Name: "build_info",
			Help:        "1, labelled with the version, the commit and the Go version the agent was built from (evictiond version).",
			ConstLabels: buildLabels(version.Get())}),
		Confinement: prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: namespace, Name: "confinement",
			Help: "1 when the agent's self-confinement control is in force on every thread (seccomp: open_by_handle_at and name_to_handle_at refused; cap_kill: CAP_KILL dropped, cgroup v2 only), 0 when not (failed, or not applicable: the start-up log says which)."}, []string{"control"}),
	}
	for _, f := range m.signals {
		r.MustRegister(f.collectors()...)
	}
	if o.LegacySignalFamilies {
		m.legacy = newLegacyFamilies()
		r.MustRegister(m.legacy.available, m.legacy.capacity, m.legacy.threshold)
	}
	r.MustRegister(m.ThresholdMet, m.NodeCondition,
		m.Evictions, m.ReclaimBytes, m.ReclaimRuns, m.MemoryReclaimBytes, m.MemoryReclaimRequests, m.MemoryReclaimEvictionsAvoided, m.PodPressureSelfInflicted, m.PodPressureSelfInflictedTotal,
		m.PodMemoryLivelocked, m.PodMemoryLivelocksTotal, m.PodMemoryLivelockRestarts, m.LoopWakeups, m.PassDuration, m.LastPass, m.StatsAge, m.ObservationErr,
		m.BrakeTotal, m.BrakeCrossingToFrozen, m.BrakeCrossingToFreed, m.BrakeEvictionPath,
		m.LoopEvictions, m.LoopWorkloads, m.EventsDropped,
		m.ConfigReloads, m.ConfigLastReloadSuccessful, m.ConfigLastReloadTime, m.BuildInfo, m.Confinement,
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}), collectors.NewGoCollector())
	m.BuildInfo.Set(1)
	return m
}

func buildLabels(v version.Info) prometheus.Labels {
	return prometheus.Labels{"version": v.Version, "revision": v.Revision, "goversion": v.GoVersion}
}
