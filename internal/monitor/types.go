// Package monitor turns the node's cgroupfs, procfs, filesystems, container
// runtime and an embedded cAdvisor into evictiond's inputs: one observation per
// eviction signal, each with the time it was read, and per-pod usage for ranking.
//
// Memory, PID and PSI signals and per-pod memory and process counts are read
// straight from cgroupfs and procfs on every pass (sub-millisecond), so they are
// never stale. Disk usage of pod logs and local volumes comes from bounded walks
// refreshed on the housekeeping interval, writable layers and image filesystems
// from the CRI, filesystem identity from cAdvisor. A value that cannot be read is
// missing, never guessed: it has no Observation and its reason is in
// Snapshot.Missing.
package monitor

import (
	"context"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/evictiond/evictiond/internal/policy"
)

// CgroupDriver is how the kubelet names cgroups (its --cgroup-driver).
type CgroupDriver string

const (
	CgroupDriverCgroupfs CgroupDriver = "cgroupfs"
	CgroupDriverSystemd  CgroupDriver = "systemd"
)

// CgroupVersion is the cgroup hierarchy in use on the node.
type CgroupVersion int

const (
	CgroupVersionAuto CgroupVersion = 0
	CgroupV1          CgroupVersion = 1
	CgroupV2          CgroupVersion = 2
)

// MemoryFormula selects how memory.available is computed.
type MemoryFormula string

const (
	// MemoryFormulaWorkingSet is the kubelet's: MemTotal - (usage - inactive_file)
	// of the root cgroup. Active page cache, slab and shmem count as used.
	MemoryFormulaWorkingSet MemoryFormula = "workingSet"
	// MemoryFormulaMemAvailable is /proc/meminfo MemAvailable: the kernel's
	// estimate of memory available without swapping, which counts reclaimable
	// page cache and slab as available.
	MemoryFormulaMemAvailable MemoryFormula = "memAvailable"
)

// PodRef is a pod on this node as the monitor needs it: its UID and QoS class
// locate its cgroup; namespace and name locate its log directory and name it
// in output. QOSClass may be empty for a pod discovered from cgroupfs before its
// tier is known.
type PodRef struct {
	UID       types.UID
	Namespace string
	Name      string
	QOSClass  string // v1.PodQOSGuaranteed, v1.PodQOSBurstable or v1.PodQOSBestEffort
	// RuntimeUID is the UID the kubelet runs the pod under when it is not
	// UID: a static pod's mirror carries it in kubernetes.io/config.mirror.
	// Cgroups, log and volume directories and CRI labels use it; results stay
	// keyed by UID.
	RuntimeUID types.UID
	// LocalStorageLimited: the pod has an emptyDir sizeLimit or a container
	// ephemeral-storage limit, which the loop checks on every pass; the disk
	// refresher measures such pods at every housekeeping, the others only as
	// often as the filesystem signals' headroom requires (diskpace.go).
	LocalStorageLimited bool
}

// runtimeUID is the UID the node knows the pod by.
func (p PodRef) runtimeUID() types.UID {
	if p.RuntimeUID != "" {
		return p.RuntimeUID
	}
	return p.UID
}

// PodRefsFromPods turns the API server's pods into what the monitor needs.
// The QoS class is the one the API server set in status (empty: the monitor
// tries each tier).
func PodRefsFromPods(pods []*v1.Pod) []PodRef {
	out := make([]PodRef, 0, len(pods))
	for _, p := range pods {
		ref := PodRef{UID: p.UID, Namespace: p.Namespace, Name: p.Name, QOSClass: string(p.Status.QOSClass),
			LocalStorageLimited: localStorageLimited(p)}
		if mirror := p.Annotations[policy.MirrorAnnotation]; mirror != "" && types.UID(mirror) != p.UID {
			ref.RuntimeUID = types.UID(mirror)
		}
		out = append(out, ref)
	}
	return out
}

// RuntimeStats is the part of the CRI the monitor reads: the image and
// container filesystems, and each container's writable layer. Its method set
// matches k8s.io/cri-api's RuntimeService and ImageManagerService.
type RuntimeStats interface {
	ImageFsInfo(ctx context.Context) (*runtimeapi.ImageFsInfoResponse, error)
	ListContainerStats(ctx context.Context, filter *runtimeapi.ContainerStatsFilter) ([]*runtimeapi.ContainerStats, error)
}

// Source says where an observation came from, for observe's output and logs.
type Source string

const (
	SourceCgroupWorkingSet Source = "cgroupfs:workingSet"
	SourceMemAvailable     Source = "procfs:MemAvailable"
	SourceMemInfoSwap      Source = "procfs:SwapFree"
	SourceProcPIDs         Source = "procfs:loadavg"
	SourceStatfs           Source = "statfs"
	SourceCRI              Source = "cri:ImageFsInfo"
	SourceCAdvisor         Source = "cadvisor:GetDirFsInfo"
	SourceProcPSI          Source = "procfs:pressure"
	SourceCgroupPSI        Source = "cgroupfs:memory.pressure"
)

// SignalReading is one signal in a Snapshot, with where it came from.
type SignalReading struct {
	Signal      policy.Signal `json:"signal"`
	Available   int64         `json:"available"`
	Capacity    int64         `json:"capacity"`
	Time        time.Time     `json:"time"`
	Source      Source        `json:"source"`
	Description string        `json:"description,omitempty"`
}

// Filesystem is one of the node's filesystems as the monitor sees it.
type Filesystem struct {
	Role       string `json:"role"` // nodefs, imagefs, containerfs
	Path       string `json:"path"` // the directory or mountpoint read (host view)
	Device     string `json:"device,omitempty"`
	Capacity   int64  `json:"capacityBytes"`
	Available  int64  `json:"availableBytes"`
	Inodes     int64  `json:"inodes"`
	InodesFree int64  `json:"inodesFree"`
	// UsedByRuntime is what the runtime says its images (imagefs) or writable
	// layers (containerfs) use, when it says.
	UsedByRuntime *int64 `json:"usedByRuntimeBytes,omitempty"`
	Source        Source `json:"source"`
}

// PodCgroup is where a pod's cgroup was found.
type PodCgroup struct {
	Pod PodRef `json:"pod"`
	// Path is the cgroup's path inside the hierarchy (e.g.
	// /kubepods/burstable/pod<uid>), the same on every v1 controller.
	Path string `json:"cgroup"`
}

// Snapshot is everything one pass read.
type Snapshot struct {
	Time          time.Time                `json:"time"`
	Observations  policy.Observations      `json:"-"`
	Readings      []SignalReading          `json:"signals"`
	Missing       map[policy.Signal]string `json:"missing,omitempty"`
	Layout        policy.FilesystemLayout  `json:"filesystemLayout"`
	Filesystems   []Filesystem             `json:"filesystems"`
	Pods          policy.PodStatsByUID     `json:"-"`
	PodCgroups    map[types.UID]PodCgroup  `json:"-"`
	PodErrors     map[types.UID]string     `json:"podErrors,omitempty"`
	CgroupInfo    CgroupInfo               `json:"cgroups"`
	MemoryFormula MemoryFormula            `json:"memoryFormula"`
}

// CgroupInfo describes the hierarchy the monitor reads and how each part of
// it was found (detect.go).
type CgroupInfo struct {
	Version     CgroupVersion `json:"version"`
	VersionFrom string        `json:"versionFrom"` // flag, mount
	Driver      CgroupDriver  `json:"driver"`
	// DriverFrom: flag, cgroupTree, cri, kubeletConfig, systemdRunning, default.
	DriverFrom string `json:"driverFrom"`
	Kubepods   string `json:"kubepods"`
	// KubepodsFound is false while the layout is provisional: the kubelet
	// has not created kubepods yet, and detection runs again every pass.
	KubepodsFound bool   `json:"kubepodsFound"`
	CgroupRoot    string `json:"cgroupRoot"`
}
