// Package notify is evictiond's kernel fast path. It arms whatever the node's
// kernel offers to learn about memory pressure as it happens, and turns every
// notification into a coalesced wake of the single decision loop:
//
//   - cgroup v1: eventfd thresholds on memory.usage_in_bytes of the root memcg
//     (memory.available) and of the kubepods memcg (allocatableMemory.available),
//     at capacity - threshold + inactive_file, re-armed as inactive_file drifts;
//   - PSI triggers ("some|full <stall> <window>") on /proc/pressure/memory and
//     the kubepods cgroup's memory.pressure (cgroup v2, or the unified
//     hierarchy of a hybrid host when kubepods exists there);
//   - cgroup v2: inotify on the kubepods cgroup's memory.events (high, max,
//     oom, oom_kill);
//   - a fast poll of the memory signals wherever a threshold cannot be watched
//     by the kernel, or a notifier failed.
//
// Notifiers never decide anything and never read stats for the loop: they only
// wake it, and the loop reads fresh numbers itself (the kubelet's notifier ran
// a whole synchronize from its own goroutine on stale cAdvisor stats; see
// kubernetes/kubernetes#51745). A notifier that cannot be armed, or fails
// later, is reported (log and metric) and replaced by the poll; it never stops
// the agent.
package notify

import (
	"log/slog"
	"time"

	"github.com/evictiond/evictiond/internal/policy"
)

// Source names what woke the loop. The values are metric label values.
type Source string

const (
	SourceMemcg        Source = "memcg"         // cgroup v1 eventfd threshold
	SourcePSI          Source = "psi"           // PSI trigger
	SourceMemoryEvents Source = "memory_events" // cgroup v2 memory.events inotify
	SourcePoll         Source = "poll"          // fast poll of the memory signals
)

// CgroupMode selects which cgroup hierarchy the notifiers expect.
type CgroupMode int

const (
	// CgroupModeAuto detects the mode from the filesystem mounted at CgroupRoot.
	CgroupModeAuto CgroupMode = iota
	// CgroupModeV1: legacy or hybrid hierarchy; the memory controller is at
	// <CgroupRoot>/memory and a (controller-less) cgroup2 may be at
	// <CgroupRoot>/unified.
	CgroupModeV1
	// CgroupModeV2: unified hierarchy at CgroupRoot.
	CgroupModeV2
)

// MarshalText writes the mode as auto, v1 or v2.
func (m CgroupMode) MarshalText() ([]byte, error) { return []byte(m.String()), nil }

func (m CgroupMode) String() string {
	switch m {
	case CgroupModeV1:
		return "v1"
	case CgroupModeV2:
		return "v2"
	default:
		return "auto"
	}
}

// PSIStallType is the first word of a PSI trigger.
type PSIStallType string

const (
	// PSISome: at least one task stalled on memory.
	PSISome PSIStallType = "some"
	// PSIFull: all non-idle tasks stalled on memory at once.
	PSIFull PSIStallType = "full"
)

// Threshold is one threshold the fast path watches, resolved to bytes of
// available memory or PIDs (or a fraction of capacity, resolved here against
// the capacity the notifier reads itself).
type Threshold struct {
	// Signal is policy.SignalMemoryAvailable (root memcg),
	// policy.SignalAllocatableMemoryAvailable (kubepods memcg),
	// policy.SignalPIDAvailable or policy.SignalNodeFsAvailable. The kernel
	// has no notifier for PIDs (the pids controller reports only forks
	// refused at its limit) nor for free disk space, so those thresholds are
	// watched by the poll alone, and keep it running.
	Signal policy.Signal
	// Hard tells hard from soft thresholds; both are armed.
	Hard bool
	// Available in bytes (PIDs for pid.available; bytes of the filesystem
	// for nodefs.available): the threshold is crossed when available memory
	// falls below it. Exactly one of Available and Percentage is set.
	Available int64
	// Percentage of capacity, in (0, 1).
	Percentage float64
	// Bound, when set, makes the threshold the larger (policy.BoundMax) or
	// smaller (policy.BoundMin) of Available and Percentage, both set
	// (policy's max(5%,500Mi) form).
	Bound policy.Bound
}

// memory reports whether a kernel memcg notifier can watch the threshold.
func (t Threshold) memory() bool {
	return t.Signal == policy.SignalMemoryAvailable || t.Signal == policy.SignalAllocatableMemoryAvailable
}

// resolve returns the threshold in bytes for the given capacity, as the
// kubelet's GetThresholdQuantity does.
func (t Threshold) resolve(capacity int64) int64 {
	pct := int64(float64(capacity) * t.Percentage)
	switch {
	case t.Bound == policy.BoundMax:
		return max(pct, t.Available)
	case t.Bound == policy.BoundMin:
		return min(pct, t.Available)
	case t.Percentage > 0:
		return pct
	}
	return t.Available
}

// name is a stable, human-readable name for logs and status.
func (t Threshold) name() string {
	kind := "soft"
	if t.Hard {
		kind = "hard"
	}
	return kind + " " + string(t.Signal)
}

// PSIOptions configure the PSI triggers.
type PSIOptions struct {
	Enabled bool
	Type    PSIStallType
	// Stall is the total stall time within Window that fires the trigger.
	Stall time.Duration
	// Window is the kernel's tracking window, 500ms..10s. A writer without
	// CAP_SYS_RESOURCE may only use multiples of 2s; when the kernel refuses
	// the window, it is rounded up to the next multiple of 2s and Stall is
	// scaled to keep the same stall percentage.
	Window time.Duration
}

// MemoryReader reads the fast signals (memory.available,
// allocatableMemory.available, pid.available, nodefs.available) fresh from
// cgroupfs, /proc and statfs.
// The daemon passes the monitor's direct reader; the poll calls it every
// PollInterval, so it must be cheap (well under a millisecond).
type MemoryReader func() (policy.Observations, error)

// Options configure the fast path. Zero values take the defaults below;
// Validate names the field, value and rule of anything out of bounds.
type Options struct {
	// CgroupRoot is where the cgroup filesystems are mounted. Default /sys/fs/cgroup.
	CgroupRoot string
	// Mode of the cgroup hierarchy. Default: detected from CgroupRoot.
	Mode CgroupMode
	// KubepodsCgroup is the pod cgroup root relative to a hierarchy's root:
	// "kubepods" (cgroupfs driver) or "kubepods.slice" (systemd driver).
	// Default "kubepods".
	KubepodsCgroup string
	// ProcRoot is where procfs is mounted. Default /proc.
	ProcRoot string

	// MemcgThresholds arms cgroup v1 eventfd thresholds.
	MemcgThresholds bool
	// MemoryEvents watches the kubepods cgroup's memory.events (cgroup v2).
	MemoryEvents bool
	// PSI triggers.
	PSI PSIOptions

	// PollInterval of the fast poll. Default 100ms; bounds 10ms..10s.
	PollInterval time.Duration
	// PollMinInterval is the shortest period of the fast poll: it reads
	// faster than PollInterval only as a signal nears a threshold (see
	// pollPacer). Default 5ms; bounds 1ms..PollInterval (equal to
	// PollInterval: a fixed period).
	PollMinInterval time.Duration
	// PollIdleInterval is the poll's longest period, taken only while every
	// watched signal is far enough from its thresholds that a ramp of
	// idleRampFactor times the assumed one could not reach one sooner (see
	// pollPacer). Default max(1s, PollInterval); bounds PollInterval..10s
	// (equal to PollInterval: never longer than PollInterval, as before).
	PollIdleInterval time.Duration
	// PollRampRate is the fastest ramp of memory use the poll assumes
	// possible from rest, in bytes per second: near a threshold it reads
	// before such a ramp could cover the headroom. Default 1Gi/s.
	PollRampRate int64
	// PollForRates keeps the poll running even where every threshold has
	// an armed kernel notifier: the brake (brake.enabled) estimates how fast
	// a signal falls from the readings before a crossing, and a memcg
	// threshold event carries none. The poll's readings reach the loop
	// through ReadMemory's owner (node.Stats). Cost far from the
	// thresholds: one read per PollIdleInterval, ~0.1 ms each.
	PollForRates bool
	// RearmInterval: how often memcg thresholds are recomputed as
	// inactive_file drifts (the kubelet uses 10s). Default 5s; bounds 100ms..1m.
	RearmInterval time.Duration

	// Thresholds on the memory signals and pid.available, hard and soft.
	Thresholds []Threshold
	// ReadMemory feeds the poll. Without it the poll cannot run, and a
	// notifier that fails leaves only the loop's ticker.
	ReadMemory MemoryReader
	// Urgent, when set, is called whenever the brake may have to act within
	// the next second: a memcg threshold event, and every poll read that
	// finds a hard threshold met, within a PollInterval of a ramp at
	// PollRampRate (100 MiB at the defaults), or within urgentHorizon of a
	// ramp at twice the rate measured since the read before. The realtime
	// boost (internal/rtboost) hangs here. It must not block.
	Urgent func()
	// Sentinel, when set, is called on the thread that waits on the
	// kernel's notifications (locked to it) and keeps that thread
	// real-time between boosts (rtboost.Booster.Sentinel), so that a memcg
	// event's handler, which calls Urgent, runs at once on a node whose CPUs
	// are all taken; the function it returns is called on the same thread
	// when the notifiers stop.
	Sentinel func() (release func())

	Logger  *slog.Logger
	Metrics *Metrics
}

// Default values.
const (
	DefaultCgroupRoot     = "/sys/fs/cgroup"
	DefaultKubepodsCgroup = "kubepods"
	DefaultProcRoot       = "/proc"
	// DefaultPollInterval is the configuration's (notifier.pollInterval).
	DefaultPollInterval    = policy.DefaultPollInterval
	DefaultPollMinInterval = 5 * time.Millisecond
	// DefaultPollIdleInterval is the configuration's (notifier.pollIdleInterval).
	DefaultPollIdleInterval = policy.DefaultPollIdleInterval
	DefaultPollRampRate     = int64(1) << 30
	// PollPIDRampRate is the fastest growth of tasks the poll assumes
	// possible from rest, per second, near a pid.available threshold: a
	// fork loop on a small node forks about 10000 a second (make bench-ramp,
	// setup bomb).
	PollPIDRampRate      = 10000
	DefaultRearmInterval = 5 * time.Second
	// The configuration's notifier.psi defaults.
	DefaultPSIStall  = policy.DefaultPSIStall
	DefaultPSIWindow = policy.DefaultPSIWindow
)

// Mode of one notifier, as Status reports it.
type Mode string

const (
	ModeArmed    Mode = "armed"    // the kernel will notify
	ModeFallback Mode = "fallback" // could not arm or failed; the poll covers it
	ModeDisabled Mode = "disabled" // turned off by configuration or not applicable
)

// NotifierStatus is the state of one notifier.
type NotifierStatus struct {
	Source Source `json:"notifier"`
	// Target says what it watches: a threshold ("hard memory.available"), or
	// a file (/proc/pressure/memory).
	Target string `json:"target"`
	Mode   Mode   `json:"mode"`
	// Detail explains the mode: the error, or what was armed.
	Detail string `json:"detail,omitempty"`
	// UsageThreshold is the armed memcg threshold in bytes of
	// memory.usage_in_bytes (memcg only).
	UsageThreshold int64 `json:"usageThresholdBytes,omitempty"`
	// Window and Stall actually written (PSI only).
	Window time.Duration `json:"window,omitempty"`
	Stall  time.Duration `json:"stall,omitempty"`
	// Since is when the notifier entered this mode.
	Since time.Time `json:"since"`
	// Notifications delivered by this notifier since it was first armed.
	Notifications uint64 `json:"notifications"`
}

// Status is a snapshot of the fast path.
type Status struct {
	Mode      CgroupMode       `json:"cgroupMode"`
	Notifiers []NotifierStatus `json:"notifiers"`
	// PollActive: the fast poll is running.
	PollActive bool `json:"pollActive"`
}
