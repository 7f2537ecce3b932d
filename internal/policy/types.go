// Package policy holds evictiond's pure decision logic: the configuration, the
// eviction signals and thresholds, grace and transition state, node conditions,
// node-level reclaim plans, pod ranking and victim choice.
//
// It follows the kubelet's eviction manager (pkg/kubelet/eviction) unless
// evictiond's design says otherwise, and it does no I/O: observations, pods and
// per-pod usage come in as plain values, time comes from an injected clock.
package policy

import (
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
)

// Signal names an eviction signal, as the kubelet spells it.
type Signal string

// The kubelet's signals.
const (
	SignalMemoryAvailable            Signal = "memory.available"
	SignalAllocatableMemoryAvailable Signal = "allocatableMemory.available"
	SignalNodeFsAvailable            Signal = "nodefs.available"
	SignalNodeFsInodesFree           Signal = "nodefs.inodesFree"
	SignalImageFsAvailable           Signal = "imagefs.available"
	SignalImageFsInodesFree          Signal = "imagefs.inodesFree"
	SignalContainerFsAvailable       Signal = "containerfs.available"
	SignalContainerFsInodesFree      Signal = "containerfs.inodesFree"
	SignalPIDAvailable               Signal = "pid.available"
)

// SignalSwapAvailable is the node's free swap (/proc/meminfo SwapFree, capacity
// SwapTotal), which the kubelet lacks: with swap on (LimitedSwap) a node can
// thrash in swap while memory.available looks fine. A node without swap has no
// observation of it at all, so a threshold on it never evicts there.
//
// Memory+swap pressure has no signal of its own: the time tasks wait on
// swap-ins of their working set is memory stall, which the memory PSI signals
// (memory.pressure.*) already measure, and RAM and swap both short is
// memory.available and swap.available met together.
const SignalSwapAvailable Signal = "swap.available"

// Pressure stall information signals, which the kubelet lacks. Their names are
// <scope>.pressure.<some|full>.<avg10|avg60|avg300>: "memory" is the node
// (/proc/pressure/memory), "allocatableMemory" the kubepods cgroup's
// memory.pressure (cgroup v2 only). Their thresholds are stall percentages and
// are met when the stall rises above them (operator ">"); see PSI below.
const (
	SignalMemoryPSISomeAvg10  Signal = "memory.pressure.some.avg10"
	SignalMemoryPSISomeAvg60  Signal = "memory.pressure.some.avg60"
	SignalMemoryPSISomeAvg300 Signal = "memory.pressure.some.avg300"
	SignalMemoryPSIFullAvg10  Signal = "memory.pressure.full.avg10"
	SignalMemoryPSIFullAvg60  Signal = "memory.pressure.full.avg60"
	SignalMemoryPSIFullAvg300 Signal = "memory.pressure.full.avg300"

	SignalAllocatableMemoryPSISomeAvg10  Signal = "allocatableMemory.pressure.some.avg10"
	SignalAllocatableMemoryPSISomeAvg60  Signal = "allocatableMemory.pressure.some.avg60"
	SignalAllocatableMemoryPSISomeAvg300 Signal = "allocatableMemory.pressure.some.avg300"
	SignalAllocatableMemoryPSIFullAvg10  Signal = "allocatableMemory.pressure.full.avg10"
	SignalAllocatableMemoryPSIFullAvg60  Signal = "allocatableMemory.pressure.full.avg60"
	SignalAllocatableMemoryPSIFullAvg300 Signal = "allocatableMemory.pressure.full.avg300"
)

// PSIScale is the capacity of every PSI observation: stall percentages are
// carried in hundredths of a percent, so 100% = 10000.
//
// A PSI observation is expressed like any other signal, as headroom:
// Available = PSIScale - stall, Capacity = PSIScale. A threshold "40%" on a PSI
// signal is therefore met when Available < 60%, i.e. when the stall exceeds
// 40%, and the whole engine keeps the kubelet's single "<" operator.
const PSIScale = 10000

// Resource is what a signal says is starved, as the kubelet names it.
type Resource string

const (
	ResourceMemory           Resource = "memory"
	ResourceEphemeralStorage Resource = "ephemeral-storage"
	ResourceInodes           Resource = "inodes"
	ResourcePIDs             Resource = "pids"
	// ResourceSwap is the node's swap space; its shortage is memory pressure
	// (MemoryPressure), its victims ranked by memory and swap together.
	ResourceSwap Resource = "swap"
)

// signalInfo is the registry entry of a signal (the kubelet's
// signalToResource and signalToNodeCondition, in one table).
type signalInfo struct {
	resource  Resource
	condition v1.NodeConditionType
	psi       bool
}

var signals = map[Signal]signalInfo{
	SignalMemoryAvailable:            {ResourceMemory, v1.NodeMemoryPressure, false},
	SignalAllocatableMemoryAvailable: {ResourceMemory, v1.NodeMemoryPressure, false},
	SignalNodeFsAvailable:            {ResourceEphemeralStorage, v1.NodeDiskPressure, false},
	SignalNodeFsInodesFree:           {ResourceInodes, v1.NodeDiskPressure, false},
	SignalImageFsAvailable:           {ResourceEphemeralStorage, v1.NodeDiskPressure, false},
	SignalImageFsInodesFree:          {ResourceInodes, v1.NodeDiskPressure, false},
	SignalContainerFsAvailable:       {ResourceEphemeralStorage, v1.NodeDiskPressure, false},
	SignalContainerFsInodesFree:      {ResourceInodes, v1.NodeDiskPressure, false},
	SignalPIDAvailable:               {ResourcePIDs, v1.NodePIDPressure, false},
	SignalSwapAvailable:              {ResourceSwap, v1.NodeMemoryPressure, false},

	SignalMemoryPSISomeAvg10:             {ResourceMemory, v1.NodeMemoryPressure, true},
	SignalMemoryPSISomeAvg60:             {ResourceMemory, v1.NodeMemoryPressure, true},
	SignalMemoryPSISomeAvg300:            {ResourceMemory, v1.NodeMemoryPressure, true},
	SignalMemoryPSIFullAvg10:             {ResourceMemory, v1.NodeMemoryPressure, true},
	SignalMemoryPSIFullAvg60:             {ResourceMemory, v1.NodeMemoryPressure, true},
	SignalMemoryPSIFullAvg300:            {ResourceMemory, v1.NodeMemoryPressure, true},
	SignalAllocatableMemoryPSISomeAvg10:  {ResourceMemory, v1.NodeMemoryPressure, true},
	SignalAllocatableMemoryPSISomeAvg60:  {ResourceMemory, v1.NodeMemoryPressure, true},
	SignalAllocatableMemoryPSISomeAvg300: {ResourceMemory, v1.NodeMemoryPressure, true},
	SignalAllocatableMemoryPSIFullAvg10:  {ResourceMemory, v1.NodeMemoryPressure, true},
	SignalAllocatableMemoryPSIFullAvg60:  {ResourceMemory, v1.NodeMemoryPressure, true},
	SignalAllocatableMemoryPSIFullAvg300: {ResourceMemory, v1.NodeMemoryPressure, true},
}

// Valid reports whether s is a signal evictiond knows.
func (s Signal) Valid() bool { _, ok := signals[s]; return ok }

// Resource is the resource the signal reports on.
func (s Signal) Resource() Resource { return signals[s].resource }

// Condition is the node condition the signal drives.
func (s Signal) Condition() v1.NodeConditionType { return signals[s].condition }

// IsPSI reports whether the signal is a pressure stall signal (operator ">").
func (s Signal) IsPSI() bool { return signals[s].psi }

// InBytes reports whether the signal's observations and thresholds are byte
// amounts (memory, swap, disk space), not counts or stall percentages.
func (s Signal) InBytes() bool { return s.Unit() == UnitBytes }

// IsMemory reports whether the signal is about memory.
func (s Signal) IsMemory() bool { return signals[s].resource == ResourceMemory }

// Unit is the base unit a signal's amounts are exported in (Prometheus'
// naming: one unit per metric family, named by its suffix).
type Unit string

const (
	UnitBytes  Unit = "bytes"
	UnitInodes Unit = "inodes"
	UnitPIDs   Unit = "pids"
	// UnitStallRatio is a PSI signal's share of time stalled, 0 to 1: its
	// PSIScale headroom is internal to the engine.
	UnitStallRatio Unit = "ratio"
)

// resourceUnits: every non-PSI signal's unit follows from its resource.
var resourceUnits = map[Resource]Unit{
	ResourceMemory: UnitBytes, ResourceSwap: UnitBytes, ResourceEphemeralStorage: UnitBytes, ResourceInodes: UnitInodes, ResourcePIDs: UnitPIDs,
}

// Unit is the unit the signal is exported in; "" for an unknown signal.
func (s Signal) Unit() Unit {
	if s.IsPSI() {
		return UnitStallRatio
	}
	return resourceUnits[s.Resource()]
}

// InUnit converts an amount of the signal as the engine carries it (an
// observation's Available, a resolved threshold) to its Unit: a PSI
// headroom becomes the stalled share, (PSIScale - v) / PSIScale; other
// amounts are already bytes, inodes or PIDs.
func (s Signal) InUnit(v int64) float64 {
	if s.IsPSI() {
		return float64(PSIScale-v) / PSIScale
	}
	return float64(v)
}

// Signals lists every known signal, kubelet signals first, in a fixed order.
func Signals() []Signal {
	out := []Signal{
		SignalMemoryAvailable, SignalAllocatableMemoryAvailable,
		SignalSwapAvailable,
		SignalNodeFsAvailable, SignalNodeFsInodesFree,
		SignalImageFsAvailable, SignalImageFsInodesFree,
		SignalContainerFsAvailable, SignalContainerFsInodesFree,
		SignalPIDAvailable,
		SignalMemoryPSISomeAvg10, SignalMemoryPSISomeAvg60, SignalMemoryPSISomeAvg300,
		SignalMemoryPSIFullAvg10, SignalMemoryPSIFullAvg60, SignalMemoryPSIFullAvg300,
		SignalAllocatableMemoryPSISomeAvg10, SignalAllocatableMemoryPSISomeAvg60, SignalAllocatableMemoryPSISomeAvg300,
		SignalAllocatableMemoryPSIFullAvg10, SignalAllocatableMemoryPSIFullAvg60, SignalAllocatableMemoryPSIFullAvg300,
	}
	return out
}

// Observation is one reading of a signal: available and capacity in the
// signal's unit (bytes, inodes, PIDs, or PSIScale units for PSI signals) and the
// time it was read. A signal that could not be read has no Observation at all;
// nothing is ever guessed.
type Observation struct {
	Available int64
	Capacity  int64
	Time      time.Time
	// PodsLeft, when set, is how much pods can still take before a cgroup
	// limit of kubepods stops them, where that comes before Available reaches
	// zero: for pid.available, kubepods' pids.max - pids.current (the
	// kubelet's systemReserved/kubeReserved pid). Thresholds keep comparing
	// Available, as the kubelet does; the brake races against the nearer wall.
	PodsLeft *int64
}

// Left is how much is left before the resource is gone for pods: Available,
// or PodsLeft when that is nearer.
func (o Observation) Left() int64 {
	if o.PodsLeft != nil && *o.PodsLeft < o.Available {
		return *o.PodsLeft
	}
	return o.Available
}

// Observations are the readings of one pass, by signal.
type Observations map[Signal]Observation

// ContainerStats is one container's usage. A nil field was not measured.
type ContainerStats struct {
	MemoryWorkingSet *int64
	RootfsBytes      *int64 // writable layer
	LogsBytes        *int64
	RootfsInodes     *int64
	LogsInodes       *int64
}

// VolumeStats is one pod volume's usage. A nil field was not measured.
type VolumeStats struct {
	UsedBytes  *int64
	InodesUsed *int64
}

// PodStats is one pod's usage, used for ranking, messages and local-storage
// limits. A nil field was not measured; the kubelet ranks pods whose stats are
// missing first, and so does evictiond.
type PodStats struct {
	MemoryWorkingSet *int64
	// MemorySwap is the pod's swap use (cgroup v2 memory.swap.current of the
	// pod cgroup); nil where swap is not accounted (cgroup v1, swapaccount=0).
	MemorySwap *int64
	// MemoryFile is the pod's page cache (cgroup v2 memory.stat file, v1
	// total_cache): what memory.reclaim can take without swap.
	MemoryFile *int64
	// MemoryPressure is the pod cgroup's memory.pressure and limit (cgroup v2).
	MemoryPressure *PodMemoryPressure
	Processes      *int64
	// Tasks counts threads too (the pod cgroup's pids.current): what
	// pid.available measures. PID ranking prefers it to Processes, which a pod
	// of few processes with thousands of threads would slip past (the
	// kubelet ranks by process count).
	Tasks      *int64
	Containers map[string]ContainerStats
	Volumes    map[string]VolumeStats
	// EphemeralStorageBytes is the pod's total local ephemeral storage use
	// (writable layers, logs, local volumes). When nil it is derived from
	// Containers and the pod's local volumes.
	EphemeralStorageBytes *int64
	Time                  time.Time
}

// PodStatsByUID is per-pod usage keyed by pod UID.
type PodStatsByUID map[types.UID]PodStats

// FilesystemLayout is how the node's filesystems are split (kubelet's
// dedicatedImageFs / splitContainerImageFs).
type FilesystemLayout struct {
	// DedicatedImageFs: images live on a filesystem other than the kubelet's root dir.
	DedicatedImageFs bool `json:"dedicatedImageFs"`
	// SplitContainerFs: writable layers (containerfs) are on nodefs while images
	// are on a dedicated imagefs (KEP-4191).
	SplitContainerFs bool `json:"splitContainerFs"`
}

// ReclaimStep is one node-level reclaim action.
type ReclaimStep string

const (
	ReclaimContainerGC ReclaimStep = "containerGC" // dead containers and sandboxes
	ReclaimImageGC     ReclaimStep = "imageGC"     // unused images, LRU
	ReclaimPodLogs     ReclaimStep = "podLogs"     // logs of pods no longer on the node
)

// NodeReclaim is the node-level reclaim plan for a starved disk signal.
type NodeReclaim struct {
	Signal Signal        `json:"signal"`
	Steps  []ReclaimStep `json:"steps"`
	// Need is how much (bytes, or inodes for inode signals) must be freed to
	// bring the signal to threshold + minimum reclaim.
	Need int64 `json:"need"`
}

// Candidate is a pod chosen for eviction, with everything needed to evict it
// and to explain why.
type Candidate struct {
	Pod    *v1.Pod
	Signal Signal
	Hard   bool
	// GracePeriodSeconds: 1 for hard thresholds and local-storage limit
	// violations; min(evictionMaxPodGracePeriod, terminationGracePeriodSeconds)
	// for soft ones, at least 1 (0 would be a forced deletion in the API).
	GracePeriodSeconds int64
	// Message is the kubelet-style eviction message.
	Message string
	// Annotations go on the Evicted Event, as the kubelet's do
	// (offending_containers, offending_containers_usage, starved_resource).
	Annotations map[string]string
	// Reason says why this pod: its rank and the ranking keys that put it there.
	Reason string
	// ExpectedReclaim is what evicting the pod should free in the signal's unit
	// (its working set for memory, its disk usage for disk signals, its
	// processes for PIDs); credited while its termination is pending.
	ExpectedReclaim int64
	// LocalStorage is set for local-storage limit violations (emptyDir
	// sizeLimit, pod or container ephemeral-storage limit).
	LocalStorage bool
	// Braked is set by the agent when the brake froze this pod before its
	// eviction and killed it on the node: its departure then says nothing
	// about how long the normal eviction path takes.
	Braked bool
	// Escalated: the pod's soft eviction is in flight and a hard threshold of
	// the same resource is met; this is the same eviction requested again
	// with the hard grace period, not a new disruption (no token, no
	// cool-down; engine_escalate.go).
	Escalated bool
}

// Clock is the time source of the engine; tests and simulate inject a virtual one.
type Clock interface {
	Now() time.Time
}

// The Evicted Event's annotations, the kubelet's keys (pkg/kubelet/eviction's
// OffendingContainersKey, OffendingContainersUsageKey, StarvedResourceKey),
// which tools reading the kubelet's Events already know.
const (
	AnnotationOffendingContainers      = "offending_containers"
	AnnotationOffendingContainersUsage = "offending_containers_usage"
	AnnotationStarvedResource          = "starved_resource"
)
