package policy

import (
	"encoding/json"
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// APIVersion and Kind of the configuration document.
const (
	APIVersion = "evictiond.io/v1alpha1"
	Kind       = "EvictionConfiguration"
)

// EvictionConfiguration is the document users write (a ConfigMap mounted as a
// file). The kubelet's field names are kept so a KubeletConfiguration's
// eviction settings can be pasted in; evictiond's own settings live in the
// sections after them. Durations are Go duration strings ("1m30s").
//
// This is the wire form: Compile validates it and turns it into a Config.
type EvictionConfiguration struct {
	APIVersion string `json:"apiVersion,omitempty"`
	Kind       string `json:"kind,omitempty"`

	// EvictionHard: signal -> threshold ("500Mi", "10%"). Unset means the
	// kubelet's Linux defaults; "0%" or "100%" disables a signal.
	EvictionHard *SignalMap `json:"evictionHard,omitempty"`
	// EvictionSoft: signal -> threshold; each needs a grace period.
	EvictionSoft *SignalMap `json:"evictionSoft,omitempty"`
	// EvictionSoftGracePeriod: signal -> duration a soft threshold must hold.
	EvictionSoftGracePeriod *SignalMap `json:"evictionSoftGracePeriod,omitempty"`
	// EvictionMinimumReclaim: signal -> how far past the threshold to reclaim.
	EvictionMinimumReclaim *SignalMap `json:"evictionMinimumReclaim,omitempty"`
	// EvictionPressureTransitionPeriod: how long a node condition stays after
	// its pressure ends. Default 5m; "0s" means the default, as in the kubelet.
	EvictionPressureTransitionPeriod string `json:"evictionPressureTransitionPeriod,omitempty"`
	// EvictionMaxPodGracePeriod caps terminationGracePeriodSeconds for soft
	// evictions. Default 0.
	EvictionMaxPodGracePeriod int32 `json:"evictionMaxPodGracePeriod"`
	// MergeDefaultEvictionSettings fills signals missing from evictionHard
	// with the defaults instead of dropping them.
	MergeDefaultEvictionSettings bool `json:"mergeDefaultEvictionSettings"`
	// EnforceNodeAllocatable: when it holds "pods", every hard memory.available
	// threshold also yields an allocatableMemory.available one. Default ["pods"].
	EnforceNodeAllocatable []string `json:"enforceNodeAllocatable"`
	// LocalStorageCapacityIsolation turns on emptyDir sizeLimit and
	// ephemeral-storage limit evictions. Default true.
	LocalStorageCapacityIsolation *bool `json:"localStorageCapacityIsolation,omitempty"`

	Loop       LoopSettings       `json:"loop"`
	Stats      StatsSettings      `json:"stats"`
	Notifier   NotifierSettings   `json:"notifier"`
	Eviction   EvictionSettings   `json:"eviction"`
	Exclusions ExclusionSettings  `json:"exclusions"`
	NodeStatus NodeStatusSettings `json:"nodeStatus"`
	Reclaim    ReclaimSettings    `json:"reclaim"`
	Brake      BrakeSettings      `json:"brake"`
	// EvictionLoops: loop detection per workload and its backoff.
	EvictionLoops EvictionLoopsSettings `json:"evictionLoops"`
	// MemoryReclaim: reclaim before evict (cgroup v2 memory.reclaim).
	MemoryReclaim MemoryReclaimSettings `json:"memoryReclaim"`
	// PodPressure: a pod stalled against its own memory limit is reported,
	// not taken for node pressure (cgroup v2).
	PodPressure PodPressureSettings `json:"podPressure"`
	// Livelock: a pod stalled at its memory limit without an OOM kill is
	// reported, and optionally restarted (cgroup v2).
	Livelock LivelockSettings `json:"livelock"`
	// DryRun runs the whole decision path and reports "would evict" / "would
	// remove" without any write but Events and metrics.
	DryRun bool `json:"dryRun"`
}

// LoopSettings tune the decision loop.
type LoopSettings struct {
	// Interval between passes when nothing wakes the loop earlier. Default 1s.
	Interval string `json:"interval,omitempty"`
	// PodCleanupTimeout bounds the wait for an evicted pod to be gone before
	// another victim may be chosen. Default 30s.
	PodCleanupTimeout string `json:"podCleanupTimeout,omitempty"`
	// VictimReleaseTimeout: a victim of a memory or PID signal still on the
	// node this long after its grace period ended holds back no other
	// eviction, and is braked (frozen, then killed through its cgroup) while
	// a threshold of its resource is met. Default 5s, 1s..10m.
	VictimReleaseTimeout string `json:"victimReleaseTimeout,omitempty"`
}

// StatsSettings tune how signals are read.
type StatsSettings struct {
	// HousekeepingInterval of the embedded cAdvisor (filesystem and per-pod
	// stats; memory signals are read fresh from cgroupfs on every pass).
	// Default 10s.
	HousekeepingInterval string `json:"housekeepingInterval,omitempty"`
	// MemoryFormula for memory.available: "workingSet" (the kubelet's:
	// capacity - (usage - inactive_file)) or "memAvailable" (/proc/meminfo
	// MemAvailable). Default workingSet.
	MemoryFormula string `json:"memoryFormula,omitempty"`
}

// NotifierSettings configure the kernel fast path; each notifier only wakes
// the loop.
type NotifierSettings struct {
	// MemcgThresholds arms cgroup v1 eventfd thresholds on memory.usage_in_bytes
	// of the root and kubepods memcgs. Default true.
	MemcgThresholds *bool `json:"memcgThresholds,omitempty"`
	// MemoryEvents watches the kubepods cgroup's memory.events (cgroup v2) with
	// inotify. Default true.
	MemoryEvents *bool `json:"memoryEvents,omitempty"`
	// PSI triggers on /proc/pressure/memory and, on cgroup v2, the kubepods
	// cgroup's memory.pressure.
	PSI PSITriggerSettings `json:"psi"`
	// PollInterval of the fast poll of the memory signals wherever no
	// notifier can be armed. Default 100ms.
	PollInterval string `json:"pollInterval,omitempty"`
	// PollIdleInterval is the longest the fast poll waits between two reads
	// while every watched signal is so far from its thresholds that a ramp
	// four times the assumed one (4 GiB/s of disk, 40000 PIDs/s; eight times,
	// 8 GiB/s, for a memory threshold no memcg threshold notification
	// watches) could not reach one before the next read. Default 1s (at least
	// pollInterval);
	// equal to pollInterval, the poll never waits longer than pollInterval.
	PollIdleInterval string `json:"pollIdleInterval,omitempty"`
}

// PSITriggerSettings configure a PSI trigger ("<type> <stall> <window>").
type PSITriggerSettings struct {
	// Enabled: default true.
	Enabled *bool `json:"enabled,omitempty"`
	// Type: "some" or "full". Default some.
	Type string `json:"type,omitempty"`
	// Stall within Window that fires the trigger. Default 100ms.
	Stall string `json:"stall,omitempty"`
	// Window: 500ms..10s; unprivileged writers need a multiple of 2s, and the
	// notifier adapts when the kernel refuses a shorter one. Default 2s.
	Window string `json:"window,omitempty"`
}

// EvictionSettings tune pod eviction.
type EvictionSettings struct {
	PDBEscalation  PDBEscalationSettings  `json:"pdbEscalation"`
	RateLimits     RateLimitSettings      `json:"rateLimits"`
	APIUnreachable APIUnreachableSettings `json:"apiUnreachable"`
}

// PDBEscalationSettings: what happens when a PodDisruptionBudget blocks an
// eviction (HTTP 429). Soft pressure always moves on to the next candidate
// and never escalates further.
type PDBEscalationSettings struct {
	// MaxCandidates is how many ranked pods are tried through the Eviction API
	// under hard pressure before escalating. Default 3 (unset only: an explicit 0
	// is an error, not the default).
	MaxCandidates *int `json:"maxCandidates,omitempty"`
	// SoftMaxCandidates is how many ranked pods one soft-pressure pass tries
	// through the Eviction API when PDBs refuse; the next pass tries again.
	// Default 5.
	SoftMaxCandidates *int `json:"softMaxCandidates,omitempty"`
	// Delete: when every candidate tried was blocked under hard pressure,
	// delete the top-ranked one directly (bypassing its PDB, with the hard
	// grace period). When false, evictiond stops there and leaves the node to
	// the kubelet's hard eviction. Default true.
	Delete *bool `json:"delete,omitempty"`
}

// RateLimitSettings bound how fast evictiond evicts.
type RateLimitSettings struct {
	// MaxPerPass caps evictions in one pass (local-storage limit violations
	// may evict several pods in a pass; threshold evictions are one per
	// pass). Default 3. The rate limits are pointers so that an explicit 0 is
	// an error rather than silently the default.
	MaxPerPass *int `json:"maxPerPass,omitempty"`
	// PerMinute is the token bucket's refill rate. Default 10.
	PerMinute *float64 `json:"perMinute,omitempty"`
	// Burst is the token bucket's size. Default 3.
	Burst *int `json:"burst,omitempty"`
	// Cooldown after an eviction before the next one. Default 1s.
	Cooldown string `json:"cooldown,omitempty"`
}

// APIUnreachableSettings: what to do when the API server cannot be reached
// while a hard threshold holds.
type APIUnreachableSettings struct {
	// CRIStop stops the chosen pod's sandbox through the CRI; the stop is
	// recorded and reported as an Event once the API server is back.
	// Default false.
	CRIStop bool `json:"criStop"`
	// After is how long the API server must have been unreachable first.
	// Default 10s.
	After string `json:"after,omitempty"`
}

// ExclusionSettings name pods evictiond never evicts, beyond the built-in
// ones (static and mirror pods, priority >= system-critical, evictiond's own pod).
type ExclusionSettings struct {
	// Namespaces whose pods are never evicted.
	Namespaces []string `json:"namespaces,omitempty"`
	// PodSelector: pods whose labels match are never evicted.
	PodSelector *metav1.LabelSelector `json:"podSelector,omitempty"`
	// DaemonSetPods: never evict pods owned by a DaemonSet (they would come
	// straight back to this node). Default true.
	DaemonSetPods *bool `json:"daemonSetPods,omitempty"`
	// MinPodAge: pods younger than this are never evicted. Default 0s.
	MinPodAge string `json:"minPodAge,omitempty"`
}

// NodeStatusSettings configure conditions and taints on the Node.
type NodeStatusSettings struct {
	// Conditions: which node conditions evictiond publishes. "own" (default):
	// its own types EvictiondMemoryPressure/EvictiondDiskPressure/
	// EvictiondPIDPressure, written once per transition. "standard": the
	// MemoryPressure/DiskPressure/PIDPressure entries (reasons Evictiond...),
	// re-asserted after every kubelet status update that flips them. "both".
	// "none": taints only. The booleans of earlier versions are accepted: true
	// is "standard", false "none".
	Conditions *ConditionsSetting `json:"conditions,omitempty"`
	// ReassertInterval: how soon an owned condition flipped by another writer
	// is set again. Default 1s.
	ReassertInterval string `json:"reassertInterval,omitempty"`
	// Taints configure evictiond's own taints.
	Taints TaintSettings `json:"taints"`
}

// ConditionsSetting is nodeStatus.conditions as written: a string, or any other
// JSON value as its text (the booleans of earlier versions are "true"/"false").
// Compile validates it, so a wrong value is an error naming field, value and rule.
type ConditionsSetting string

// UnmarshalJSON accepts any JSON value.
func (c *ConditionsSetting) UnmarshalJSON(b []byte) error {
	var s string
	if json.Unmarshal(b, &s) != nil {
		s = string(b)
	}
	*c = ConditionsSetting(s)
	return nil
}

// TaintSettings: effect of each of evictiond's taints ("NoSchedule",
// "PreferNoSchedule", or "" for no taint).
type TaintSettings struct {
	// Enabled: default true.
	Enabled *bool `json:"enabled,omitempty"`
	// MemoryPressure: default NoSchedule (what the standard
	// node.kubernetes.io/memory-pressure taint does to every pod without a
	// toleration for it).
	MemoryPressure *string `json:"memoryPressure,omitempty"`
	// DiskPressure: default NoSchedule.
	DiskPressure *string `json:"diskPressure,omitempty"`
	// PIDPressure: default NoSchedule.
	PIDPressure *string `json:"pidPressure,omitempty"`
}

// ReclaimSettings configure node-level reclaim through the CRI.
type ReclaimSettings struct {
	// CRIEndpoint of the container runtime. Default: detected on the node
	// (the kubelet configuration's containerRuntimeEndpoint, else the first
	// of containerd's, CRI-O's, k3s's and cri-dockerd's sockets that exists).
	CRIEndpoint string `json:"criEndpoint,omitempty"`
	// ContainerGC removes dead containers and sandboxes of pods no longer on
	// the node. Default true.
	ContainerGC *bool `json:"containerGC,omitempty"`
	// ImageGC removes unused images, least recently used first.
	ImageGC ImageGCSettings `json:"imageGC"`
	// PodLogs removes /var/log/pods directories of pods no longer on the node.
	// Default true.
	PodLogs *bool `json:"podLogs,omitempty"`
}

// ImageGCSettings configure image garbage collection.
type ImageGCSettings struct {
	// Enabled: default true.
	Enabled *bool `json:"enabled,omitempty"`
	// MinAge: images first seen less than this long ago are kept. Default 2m.
	MinAge string `json:"minAge,omitempty"`
	// PinnedImages are kept in addition to those the runtime reports pinned.
	PinnedImages []string `json:"pinnedImages,omitempty"`
	// StateFile keeps first-seen and last-used times across restarts.
	// Default /var/lib/evictiond/images.json.
	StateFile string `json:"stateFile,omitempty"`
}

// BrakeSettings configure the brake: under a hard threshold whose resource
// would run out before the normal eviction path completes, the victim's pod
// cgroup is frozen before its eviction is requested and killed on the node
// once the API server accepts it (docs/fast-path.md).
type BrakeSettings struct {
	// Enabled: default true.
	Enabled *bool `json:"enabled,omitempty"`
	// EvictionPath is how long the normal eviction path takes (eviction
	// accepted -> pod gone): "measured" (default) keeps a moving estimate of
	// this node's hard evictions, or a duration fixes it.
	EvictionPath string `json:"evictionPath,omitempty"`
	// InitialEvictionPath is the estimate until the first hard eviction is
	// measured. Default 2s.
	InitialEvictionPath string `json:"initialEvictionPath,omitempty"`
	// SafetyFactor: the brake fires when the time to exhaustion is below
	// SafetyFactor × the eviction path. Default 1.5; 1 to 10.
	SafetyFactor *float64 `json:"safetyFactor,omitempty"`
	// MaxFreeze bounds how long a pod stays frozen whatever happens (the
	// API server slow or down); then it is thawed. Default 15s.
	MaxFreeze string `json:"maxFreeze,omitempty"`
	// SampleInterval: when the rate at hand was averaged over more than
	// twice this long (a ramp may have begun within it) and does not call
	// for the brake, the loop reads again after this long to know the rate
	// now; rates are never taken from readings less than this apart (the
	// kernel's memory counters are batched per CPU: a few hundred KiB of
	// noise, 50 MiB/s over 10 ms).
	// Default 10ms.
	SampleInterval string `json:"sampleInterval,omitempty"`
	// Realtime raises the agent's threads to SCHED_FIFO near and at a hard
	// threshold, so the brake's reaction does not wait behind CPU-bound pods
	// (internal/rtboost; RLIMIT_RTPRIO 1, set with CAP_SYS_RESOURCE, or
	// CAP_SYS_NICE).
	Realtime *BrakeRealtimeSettings `json:"realtime,omitempty"`
}

// BrakeRealtimeSettings is brake.realtime.
type BrakeRealtimeSettings struct {
	// Enabled: default true (since 2026-11-26; the boost is refused and
	// logged where the kernel does not allow it, and the brake works as
	// before).
	Enabled *bool `json:"enabled,omitempty"`
}

// SignalMap is a signal -> value map. In YAML it is either a mapping
// ({memory.available: 500Mi}) or the kubelet's flag form, a string
// ("memory.available<500Mi,nodefs.available<10%" for thresholds,
// "memory.available=1m30s" for grace periods and minimum reclaim). The flag
// form is parsed by Compile, which knows the field's name for errors.
type SignalMap struct {
	Values map[string]string
	// Flag is the flag form as written, before Compile parses it.
	Flag string
	// IsFlag records that the flag form was used.
	IsFlag bool
}

// UnmarshalJSON accepts a mapping or a flag-form string.
func (m *SignalMap) UnmarshalJSON(data []byte) error {
	var s string
	if err := json.Unmarshal(data, &s); err == nil {
		*m = SignalMap{Flag: s, IsFlag: true}
		return nil
	}
	var generic map[string]any
	if err := json.Unmarshal(data, &generic); err != nil {
		return err
	}
	values := make(map[string]string, len(generic))
	for k, v := range generic {
		switch v := v.(type) {
		case string:
			values[k] = v
		case float64, bool:
			// YAML turns 1 into a number; keep its text so Compile can judge it.
			values[k] = fmt.Sprint(v)
		default:
			values[k] = string(mustJSON(v))
		}
	}
	*m = SignalMap{Values: values}
	return nil
}

func mustJSON(v any) []byte {
	b, _ := json.Marshal(v)
	return b
}

// MarshalJSON writes the mapping form.
func (m SignalMap) MarshalJSON() ([]byte, error) {
	if m.Values == nil {
		return []byte("{}"), nil
	}
	return json.Marshal(m.Values)
}

// given is the mapping as written, nil when unset or in flag form (which
// names the same keys: only presence is asked of it).
func (m *SignalMap) given() map[string]string {
	if m == nil {
		return nil
	}
	if m.IsFlag {
		values, _ := ParseFlagForm(m.Flag, true)
		return values
	}
	return m.Values
}
