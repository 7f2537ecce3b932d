package monitor

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/procfs"
	"golang.org/x/sys/unix"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/evictiond/evictiond/internal/policy"
)

// Config says where the node's files are and how its cgroups are named.
// Paths are as the host sees them; HostRoot is prepended to each, so a
// DaemonSet that mounts the host at /host sets HostRoot "/host".
type Config struct {
	HostRoot       string
	ProcDir        string // default /proc
	CgroupDir      string // default /sys/fs/cgroup
	KubeletRootDir string // default /var/lib/kubelet: nodefs, pod volumes
	PodLogsDir     string // default /var/log/pods
	// ImageFsDir is where the runtime keeps images, read through cAdvisor when
	// the CRI cannot be asked. Default /var/lib/containerd.
	ImageFsDir string

	CgroupDriver  CgroupDriver  // default cgroupfs
	CgroupRoot    string        // the kubelet's --cgroup-root, default "/"
	CgroupVersion CgroupVersion // default: detected

	MemoryFormula MemoryFormula // default workingSet
	// HousekeepingInterval is cAdvisor's housekeeping and the refresh period of
	// per-pod disk usage. Default 10s.
	HousekeepingInterval time.Duration
	// MaxWalkEntries bounds each directory walk (one volume, one pod's logs);
	// a larger tree is reported missing. Default 1,000,000.
	MaxWalkEntries int
	// RuntimeTimeout bounds each CRI call. Default 2s.
	RuntimeTimeout time.Duration

	// Runtime is the CRI to read image/container filesystems and writable
	// layers from; nil reads imagefs through cAdvisor and leaves writable
	// layers missing.
	Runtime RuntimeStats
	// DisableCAdvisor keeps cAdvisor from starting; the imagefs fallback then
	// reads statfs directly.
	DisableCAdvisor bool
	// CAdvisorWatchPods makes cAdvisor housekeep every cgroup under kubepods
	// too, not only the root cgroup. Off by default: evictiond reads pods'
	// memory and processes itself, and with only filesystem metrics on,
	// cAdvisor's per-cgroup housekeeping yields nothing it uses while costing
	// about 2% of a core for 100 pods at a 10 s interval (BenchmarkMonitorWatching100Pods).
	CAdvisorWatchPods bool

	// SignalReadErrors is the counter (label "signal") that failed readings
	// are counted in: the daemon passes internal/metrics' ObservationErr. Nil:
	// the monitor makes its own, listed by Collectors.
	SignalReadErrors *prometheus.CounterVec

	Logger *slog.Logger
}

func (c Config) withDefaults() Config {
	def := func(s *string, v string) {
		if *s == "" {
			*s = v
		}
	}
	def(&c.ProcDir, "/proc")
	def(&c.CgroupDir, "/sys/fs/cgroup")
	def(&c.KubeletRootDir, "/var/lib/kubelet")
	def(&c.PodLogsDir, "/var/log/pods")
	def(&c.ImageFsDir, "/var/lib/containerd")
	def(&c.CgroupRoot, "/")
	if c.CgroupDriver == "" {
		c.CgroupDriver = CgroupDriverCgroupfs
	}
	if c.MemoryFormula == "" {
		c.MemoryFormula = MemoryFormulaWorkingSet
	}
	if c.HousekeepingInterval == 0 {
		c.HousekeepingInterval = 10 * time.Second
	}
	if c.MaxWalkEntries == 0 {
		c.MaxWalkEntries = 1_000_000
	}
	if c.RuntimeTimeout == 0 {
		c.RuntimeTimeout = 2 * time.Second
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return c
}

// ParseMemoryFormula checks a stats.memoryFormula value.
func ParseMemoryFormula(s string) (MemoryFormula, error) {
	switch f := MemoryFormula(s); f {
	case "":
		return MemoryFormulaWorkingSet, nil
	case MemoryFormulaWorkingSet, MemoryFormulaMemAvailable:
		return f, nil
	}
	return "", fmt.Errorf("stats.memoryFormula %q: must be %q or %q", s, MemoryFormulaWorkingSet, MemoryFormulaMemAvailable)
}

// Monitor reads the node. Observe is meant to be called from one goroutine
// (the decision loop); the disk refresher started by Start runs beside it.
type Monitor struct {
	cfg      Config
	log      *slog.Logger
	layout   *cgroupLayout
	proc     procfs.FS
	procDir  string
	nodeFs   string
	imageFs  string
	walker   diskWalker
	metrics  *metrics
	cadvisor *embeddedCAdvisor

	mu         sync.Mutex
	pods       []PodRef
	disk       map[types.UID]podDisk
	layers     map[types.UID]map[string]writableLayer
	containers map[string]containerName // CRI container ID -> pod and name
	layersRead bool
	// runtimeFailing is which CRI calls failed last time, to log transitions.
	runtimeFailing map[string]bool

	stopRefresh context.CancelFunc
	refreshDone chan struct{}
}

type containerName struct {
	pod  types.UID
	name string
}

// New checks the configuration and finds the cgroup hierarchy; it starts
// nothing (see Start).
func New(cfg Config) (*Monitor, error) {
	cfg = cfg.withDefaults()
	if _, err := ParseMemoryFormula(string(cfg.MemoryFormula)); err != nil {
		return nil, err
	}
	if cfg.HousekeepingInterval < 0 {
		return nil, fmt.Errorf("stats.housekeepingInterval %s: must be positive", cfg.HousekeepingInterval)
	}
	procDir := hostPath(cfg.HostRoot, cfg.ProcDir)
	proc, err := procfs.NewFS(procDir)
	if err != nil {
		return nil, fmt.Errorf("opening procfs at %s: %w", procDir, err)
	}
	layout, err := newCgroupLayout(cfg.CgroupVersion, cfg.CgroupDriver, hostPath(cfg.HostRoot, cfg.CgroupDir), cfg.CgroupRoot)
	if err != nil {
		return nil, err
	}
	return &Monitor{
		cfg:     cfg,
		log:     cfg.Logger.With("component", "monitor"),
		layout:  layout,
		proc:    proc,
		procDir: procDir,
		nodeFs:  hostPath(cfg.HostRoot, cfg.KubeletRootDir),
		imageFs: hostPath(cfg.HostRoot, cfg.ImageFsDir),
		walker: diskWalker{
			kubeletRootDir: hostPath(cfg.HostRoot, cfg.KubeletRootDir),
			podLogsDir:     hostPath(cfg.HostRoot, cfg.PodLogsDir),
			maxEntries:     cfg.MaxWalkEntries,
		},
		metrics:        newMetrics(cfg.SignalReadErrors),
		disk:           map[types.UID]podDisk{},
		containers:     map[string]containerName{},
		runtimeFailing: map[string]bool{},
	}, nil
}

// Collectors are the monitor's Prometheus metrics, for the daemon to register.
func (m *Monitor) Collectors() []prometheus.Collector {
	return m.metrics.collectors(m.cfg.SignalReadErrors == nil)
}

// CgroupInfo says which hierarchy is read.
func (m *Monitor) CgroupInfo() CgroupInfo {
	return CgroupInfo{Version: m.layout.version, Driver: m.layout.driver, Kubepods: m.layout.kubepods}
}

// Start starts the embedded cAdvisor (unless disabled) and the refresher of
// per-pod disk usage, until Stop or ctx ends.
func (m *Monitor) Start(ctx context.Context) error {
	if !m.cfg.DisableCAdvisor {
		var watch []string
		if m.cfg.CAdvisorWatchPods {
			watch = []string{m.layout.kubepods}
		}
		c, err := startCAdvisor(m.cfg.HousekeepingInterval, watch)
		if err != nil {
			return err
		}
		m.cadvisor = c
	}
	ctx, cancel := context.WithCancel(ctx)
	m.stopRefresh = cancel
	m.refreshDone = make(chan struct{})
	go func() {
		defer close(m.refreshDone)
		t := time.NewTicker(m.cfg.HousekeepingInterval)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				m.refreshDisk(ctx)
			}
		}
	}()
	return nil
}

// Stop stops what Start started.
func (m *Monitor) Stop() error {
	if m.stopRefresh != nil {
		m.stopRefresh()
		<-m.refreshDone
	}
	if m.cadvisor != nil {
		return m.cadvisor.stop()
	}
	return nil
}

// snapshotBuilder collects one pass's readings.
type snapshotBuilder struct {
	s       *Snapshot
	metrics *metrics
}

func (b *snapshotBuilder) add(sig policy.Signal, available, capacity int64, at time.Time, src Source, desc string) {
	b.s.Observations[sig] = policy.Observation{Available: available, Capacity: capacity, Time: at}
	b.s.Readings = append(b.s.Readings, SignalReading{Signal: sig, Available: available, Capacity: capacity, Time: at, Source: src, Description: desc})
}

// miss records a signal with no observation. failed says a read was tried
// and failed (counted), as opposed to a signal that does not exist here (the
// kubepods cgroup has no limit; no PSI for kubepods on cgroup v1).
func (b *snapshotBuilder) miss(sig policy.Signal, reason string, failed bool) {
	b.s.Missing[sig] = reason
	if failed {
		b.metrics.signalReadErrors.WithLabelValues(string(sig)).Inc()
	}
}

func newSnapshot(m *Monitor) (*Snapshot, *snapshotBuilder) {
	s := &Snapshot{
		Time:          time.Now(),
		Observations:  policy.Observations{},
		Missing:       map[policy.Signal]string{},
		Pods:          policy.PodStatsByUID{},
		PodCgroups:    map[types.UID]PodCgroup{},
		PodErrors:     map[types.UID]string{},
		CgroupInfo:    m.CgroupInfo(),
		MemoryFormula: m.cfg.MemoryFormula,
	}
	return s, &snapshotBuilder{s: s, metrics: m.metrics}
}

// ObserveMemory reads only the memory signals (memory.available,
// allocatableMemory.available and the PSI ones): the fast path a notifier
// wake-up needs, well under a millisecond.
func (m *Monitor) ObserveMemory() *Snapshot {
	s, b := newSnapshot(m)
	m.readMemorySignals(b)
	return s
}

// Observe reads every signal and the usage of the given pods: ObserveNode and
// ObservePods in one snapshot.
func (m *Monitor) Observe(ctx context.Context, pods []PodRef) *Snapshot {
	s := m.ObserveNode(ctx)
	m.readPods(ctx, s, pods)
	return s
}

// ObserveNode reads every node signal (memory, PID, PSI, filesystems) and the
// filesystem layout, without per-pod usage: what each pass of the loop needs
// while no threshold is met.
func (m *Monitor) ObserveNode(ctx context.Context) *Snapshot {
	s, b := newSnapshot(m)
	m.readMemorySignals(b)
	m.readPIDSignal(b)
	m.readFilesystemSignals(ctx, b)
	sort.Slice(s.Readings, func(i, j int) bool { return signalOrder(s.Readings[i].Signal) < signalOrder(s.Readings[j].Signal) })
	return s
}

// SetPods tells the disk usage refresher which pods to measure, for loops
// that call ObservePods only under pressure.
func (m *Monitor) SetPods(pods []PodRef) {
	m.mu.Lock()
	m.pods = append(m.pods[:0], pods...)
	m.mu.Unlock()
}

// ObservePods adds the usage of the given pods to a snapshot: memory working
// set and process counts read fresh from cgroupfs, disk usage from the
// housekeeping cache. The loop calls it when it must rank pods or check
// local-storage limits; reading 100 pods costs tens of milliseconds of
// kernel time on cgroup v1, which a 1 s loop should not pay when nothing
// is starved.
func (m *Monitor) ObservePods(ctx context.Context, s *Snapshot, pods []PodRef) {
	m.readPods(ctx, s, pods)
}

func signalOrder(sig policy.Signal) int {
	for i, s := range policy.Signals() {
		if s == sig {
			return i
		}
	}
	return len(policy.Signals())
}

func (m *Monitor) readMemorySignals(b *snapshotBuilder) {
	mi, err := readMeminfo(m.proc, m.procDir)
	if err != nil {
		b.miss(policy.SignalMemoryAvailable, err.Error(), true)
	} else {
		m.readMemoryAvailable(b, mi)
	}
	m.readAllocatableMemory(b)
	m.readPSI(b)
}

func (m *Monitor) readMemoryAvailable(b *snapshotBuilder, mi meminfo) {
	switch m.cfg.MemoryFormula {
	case MemoryFormulaMemAvailable:
		if mi.memAvailable < 0 {
			b.miss(policy.SignalMemoryAvailable, "memoryFormula memAvailable: the kernel's meminfo has no MemAvailable", true)
			return
		}
		b.add(policy.SignalMemoryAvailable, mi.memAvailable, mi.memTotal, time.Now(), SourceMemAvailable,
			"MemAvailable of /proc/meminfo; capacity MemTotal")
	default:
		u, err := m.layout.readRootMemcgUsage()
		if err != nil {
			b.miss(policy.SignalMemoryAvailable, err.Error(), true)
			return
		}
		ws := u.workingSet()
		b.add(policy.SignalMemoryAvailable, mi.memTotal-ws, mi.memTotal, time.Now(), SourceCgroupWorkingSet,
			fmt.Sprintf("MemTotal %d - root working set %d (usage %d - inactive_file %d)", mi.memTotal, ws, u.usage, u.inactiveFile))
	}
}

// readAllocatableMemory is the kubepods cgroup's limit minus its working
// set. Without a limit (enforceNodeAllocatable lacks "pods") the kubelet has
// no such signal, and neither does evictiond.
func (m *Monitor) readAllocatableMemory(b *snapshotBuilder) {
	sig := policy.SignalAllocatableMemoryAvailable
	limit, err := m.layout.readMemoryLimit(m.layout.kubepods)
	if err != nil {
		b.miss(sig, err.Error(), true)
		return
	}
	if limit >= unlimitedMemory {
		b.miss(sig, fmt.Sprintf("cgroup %s has no memory limit (the kubelet enforces node allocatable on pods only with enforceNodeAllocatable: [pods])", m.layout.kubepods), false)
		return
	}
	u, err := m.layout.readMemcgUsage(m.layout.kubepods)
	if err != nil {
		b.miss(sig, err.Error(), true)
		return
	}
	ws := u.workingSet()
	b.add(sig, limit-ws, limit, time.Now(), SourceCgroupWorkingSet,
		fmt.Sprintf("%s limit %d - working set %d", m.layout.kubepods, limit, ws))
}

func (m *Monitor) readPSI(b *snapshotBuilder) {
	node, err := readProcPSI(m.proc, m.procDir)
	at := time.Now()
	if err != nil {
		for _, sig := range nodePSISignals {
			b.miss(sig, err.Error(), true)
		}
	} else {
		addPSI(b, node, nodePSISignals, at, SourceProcPSI)
	}
	if m.layout.version != CgroupV2 {
		for _, sig := range allocatablePSISignals {
			b.miss(sig, "the kubepods cgroup's memory.pressure exists only on cgroup v2", false)
		}
		return
	}
	pods, err := readPSIFile(filepath.Join(m.layout.dir("memory", m.layout.kubepods), "memory.pressure"))
	at = time.Now()
	if err != nil {
		for _, sig := range allocatablePSISignals {
			b.miss(sig, err.Error(), true)
		}
		return
	}
	addPSI(b, pods, allocatablePSISignals, at, SourceCgroupPSI)
}

func addPSI(b *snapshotBuilder, r psiReading, names psiSignals, at time.Time, src Source) {
	values := r.values(names)
	for _, sig := range names {
		stall, ok := values[sig]
		if !ok {
			b.miss(sig, "the pressure file has no \"full\" line", true)
			continue
		}
		b.add(sig, psiHeadroom(stall), policy.PSIScale, at, src, fmt.Sprintf("stall %.2f%%", stall))
	}
}

func (m *Monitor) readPIDSignal(b *snapshotBuilder) {
	r, err := readPIDs(m.procDir)
	if err != nil {
		b.miss(policy.SignalPIDAvailable, err.Error(), true)
		return
	}
	b.add(policy.SignalPIDAvailable, r.maxPID-r.running, r.maxPID, time.Now(), SourceProcPIDs,
		fmt.Sprintf("min(pid_max, threads-max) %d - tasks %d", r.maxPID, r.running))
}

// readFilesystemSignals reads nodefs from the filesystem holding the
// kubelet's root dir, and imagefs/containerfs from the filesystems the CRI
// names (falling back to cAdvisor's view of ImageFsDir).
func (m *Monitor) readFilesystemSignals(ctx context.Context, b *snapshotBuilder) {
	node, err := statFilesystem(m.nodeFs)
	if err != nil {
		b.miss(policy.SignalNodeFsAvailable, err.Error(), true)
		b.miss(policy.SignalNodeFsInodesFree, err.Error(), true)
	} else {
		at := time.Now()
		m.addFs(b, "nodefs", m.cfg.KubeletRootDir, node, at, SourceStatfs, nil,
			policy.SignalNodeFsAvailable, policy.SignalNodeFsInodesFree)
	}

	image, container, ok := m.readRuntimeFs(ctx, b)
	if !ok {
		return
	}
	if node.device != 0 {
		b.s.Layout = policy.FilesystemLayout{
			DedicatedImageFs: image.device != node.device,
			SplitContainerFs: container.device != image.device,
		}
	}
}

// readRuntimeFs returns the imagefs and containerfs usage and reports their
// signals.
func (m *Monitor) readRuntimeFs(ctx context.Context, b *snapshotBuilder) (image, container fsUsage, ok bool) {
	imageSigs := [2]policy.Signal{policy.SignalImageFsAvailable, policy.SignalImageFsInodesFree}
	containerSigs := [2]policy.Signal{policy.SignalContainerFsAvailable, policy.SignalContainerFsInodesFree}
	var criErr error
	if m.cfg.Runtime != nil {
		cctx, cancel := context.WithTimeout(ctx, m.cfg.RuntimeTimeout)
		rfs, err := readRuntimeFilesystems(cctx, m.cfg.Runtime)
		cancel()
		m.noteRuntime("ImageFsInfo", err)
		if err == nil {
			image, err = statFilesystem(hostPath(m.cfg.HostRoot, rfs.imageMountpoint))
		}
		if err == nil {
			container, err = statFilesystem(hostPath(m.cfg.HostRoot, rfs.containerMountpoint))
		}
		if err == nil {
			at := time.Now()
			m.addFs(b, "imagefs", rfs.imageMountpoint, image, at, SourceCRI, rfs.imageUsed, imageSigs[0], imageSigs[1])
			m.addFs(b, "containerfs", rfs.containerMountpoint, container, at, SourceCRI, rfs.containerUsed, containerSigs[0], containerSigs[1])
			return image, container, true
		}
		criErr = err
	}
	var err error
	src := SourceStatfs
	at := time.Now()
	if m.cadvisor != nil {
		src = SourceCAdvisor
		image, at, err = m.cadvisorFs(m.imageFs)
	} else {
		image, err = statFilesystem(m.imageFs)
	}
	if err != nil {
		reason := err.Error()
		if criErr != nil {
			reason = criErr.Error() + "; fallback: " + reason
		}
		for _, sig := range append(imageSigs[:], containerSigs[:]...) {
			b.miss(sig, reason, true)
		}
		return image, container, false
	}
	// Without the CRI's word, writable layers are taken to live with the images.
	m.addFs(b, "imagefs", m.cfg.ImageFsDir, image, at, src, nil, imageSigs[0], imageSigs[1])
	m.addFs(b, "containerfs", m.cfg.ImageFsDir, image, at, src, nil, containerSigs[0], containerSigs[1])
	return image, image, true
}

// cadvisorFs reads a directory's filesystem through cAdvisor, as the kubelet
// does, with the time of cAdvisor's reading; inode counts are missing when
// cAdvisor has none (e.g. some overlay or network filesystems).
func (m *Monitor) cadvisorFs(dir string) (fsUsage, time.Time, error) {
	fi, err := m.cadvisor.dirFsInfo(dir)
	if err != nil {
		return fsUsage{}, time.Time{}, err
	}
	var st unix.Stat_t
	if err := unix.Stat(dir, &st); err != nil {
		return fsUsage{}, time.Time{}, fmt.Errorf("stat %s: %w", dir, err)
	}
	u := fsUsage{device: st.Dev, capacity: int64(fi.Capacity), available: int64(fi.Available), inodes: -1, inodesFree: -1}
	if fi.Inodes != nil && fi.InodesFree != nil {
		u.inodes, u.inodesFree = int64(*fi.Inodes), int64(*fi.InodesFree)
	}
	return u, fi.Timestamp, nil
}

func (m *Monitor) addFs(b *snapshotBuilder, role, path string, u fsUsage, at time.Time, src Source, used *int64, bytesSig, inodesSig policy.Signal) {
	b.s.Filesystems = append(b.s.Filesystems, Filesystem{
		Role: role, Path: path, Device: fmt.Sprintf("%d:%d", unix.Major(u.device), unix.Minor(u.device)),
		Capacity: u.capacity, Available: u.available, Inodes: u.inodes, InodesFree: u.inodesFree,
		UsedByRuntime: used, Source: src,
	})
	b.add(bytesSig, u.available, u.capacity, at, src, role+" "+path)
	if u.inodes < 0 {
		b.miss(inodesSig, role+" "+path+": no inode counts", true)
		return
	}
	b.add(inodesSig, u.inodesFree, u.inodes, at, src, role+" "+path)
}

// DiscoverPods lists the pods that have a cgroup under kubepods, for when no
// pod list is at hand; their names are unknown.
func (m *Monitor) DiscoverPods() ([]PodRef, error) {
	found, err := m.layout.discoverPods()
	if err != nil {
		return nil, err
	}
	out := make([]PodRef, 0, len(found))
	for _, pc := range found {
		out = append(out, pc.Pod)
	}
	return out, nil
}

// locatePod finds a pod's cgroup: by its QoS tier when known, else by trying
// each tier.
func (m *Monitor) locatePod(pod PodRef) (string, error) {
	tiers := []string{pod.QOSClass}
	if pod.QOSClass == "" {
		tiers = []string{string(v1.PodQOSGuaranteed), string(v1.PodQOSBurstable), string(v1.PodQOSBestEffort)}
	}
	for _, qos := range tiers {
		p, err := m.layout.podCgroupPath(pod.runtimeUID(), qos)
		if err != nil {
			return "", err
		}
		if len(tiers) == 1 {
			return p, nil // a missing cgroup shows as a failed read of it
		}
		if _, err := os.Stat(m.layout.dir("memory", p)); err == nil {
			return p, nil
		}
	}
	want, _ := m.layout.podCgroupPath(pod.runtimeUID(), pod.QOSClass)
	if want == "" {
		want = "any QoS tier under " + m.layout.kubepods
	}
	return "", fmt.Errorf("pod %s: no cgroup at %s: %w", pod.UID, want, fs.ErrNotExist)
}

func (m *Monitor) readPods(ctx context.Context, s *Snapshot, pods []PodRef) {
	m.mu.Lock()
	m.pods = append(m.pods[:0], pods...)
	needLayers := m.cfg.Runtime != nil && !m.layersRead
	m.mu.Unlock()
	if needLayers {
		m.refreshLayers(ctx)
	}
	logs := &logListing{dir: m.walker.podLogsDir, log: m.log}
	for _, pod := range pods {
		ps := policy.PodStats{Containers: map[string]policy.ContainerStats{}, Volumes: map[string]policy.VolumeStats{}}
		var errs []string
		cg, err := m.locatePod(pod)
		var u memcgUsage
		if err == nil {
			u, err = m.layout.readMemcgUsage(cg)
			if errors.Is(err, fs.ErrNotExist) {
				err = fmt.Errorf("pod %s: no cgroup at %s: %w", pod.UID, cg, fs.ErrNotExist)
			}
		}
		switch {
		case errors.Is(err, fs.ErrNotExist):
			errs = append(errs, err.Error())
			m.metrics.podReadErrors.WithLabelValues("cgroup").Inc()
		case err != nil:
			s.PodCgroups[pod.UID] = PodCgroup{Pod: pod, Path: cg}
			errs = append(errs, err.Error())
			m.metrics.podReadErrors.WithLabelValues("memory").Inc()
		default:
			s.PodCgroups[pod.UID] = PodCgroup{Pod: pod, Path: cg}
			ws := u.workingSet()
			ps.MemoryWorkingSet = &ws
			if n, err := m.layout.countProcesses(cg); err != nil {
				errs = append(errs, err.Error())
				m.metrics.podReadErrors.WithLabelValues("processes").Inc()
			} else {
				ps.Processes = &n
			}
			m.readContainerMemory(cg, pod.runtimeUID(), &ps)
		}
		ps.Time = time.Now()
		errs = append(errs, m.addDiskUsage(pod, &ps, logs)...)
		s.Pods[pod.UID] = ps
		if len(errs) > 0 {
			s.PodErrors[pod.UID] = strings.Join(errs, "; ")
		}
	}
}

// readContainerMemory reads each container's working set from the pod
// cgroup's children (<pod>/<id> with cgroupfs, <pod>/cri-containerd-<id>.scope
// with systemd), naming them through the CRI's container list.
func (m *Monitor) readContainerMemory(podCgroup string, uid types.UID, ps *policy.PodStats) {
	m.mu.Lock()
	known := len(m.containers) > 0
	m.mu.Unlock()
	if !known {
		return
	}
	entries, err := os.ReadDir(m.layout.dir("memory", podCgroup))
	if err != nil {
		return
	}
	for _, e := range entries {
		if !e.IsDir() {
			continue
		}
		id := strings.TrimSuffix(e.Name(), ".scope")
		if i := strings.LastIndexByte(id, '-'); i >= 0 {
			id = id[i+1:]
		}
		m.mu.Lock()
		cn, ok := m.containers[id]
		m.mu.Unlock()
		if !ok || cn.pod != uid {
			continue
		}
		u, err := m.layout.readMemcgUsage(podCgroup + "/" + e.Name())
		if err != nil {
			m.metrics.podReadErrors.WithLabelValues("containerMemory").Inc()
			continue
		}
		ws := u.workingSet()
		cs := ps.Containers[cn.name]
		cs.MemoryWorkingSet = &ws
		ps.Containers[cn.name] = cs
	}
}

// addDiskUsage fills logs, writable layers and local volumes from the
// refresher's cache, measuring a pod the cache has not seen yet.
func (m *Monitor) addDiskUsage(pod PodRef, ps *policy.PodStats, logs *logListing) []string {
	m.mu.Lock()
	d, ok := m.disk[pod.UID]
	layers := m.layers[pod.runtimeUID()]
	runtimeKnown := m.cfg.Runtime != nil && m.layers != nil
	m.mu.Unlock()
	if !ok {
		var listing []os.DirEntry
		if pod.Namespace == "" || pod.Name == "" {
			listing = logs.entries()
		}
		d = m.walker.measure(pod, listing)
		m.mu.Lock()
		m.disk[pod.UID] = d
		m.mu.Unlock()
	}
	for name, u := range d.containerLogs {
		cs := ps.Containers[name]
		cs.LogsBytes, cs.LogsInodes = ptr(u.bytes), ptr(u.inodes)
		ps.Containers[name] = cs
	}
	for name, wl := range layers {
		cs := ps.Containers[name]
		cs.RootfsBytes, cs.RootfsInodes = wl.bytes, wl.inodes
		ps.Containers[name] = cs
	}
	for name, u := range d.volumes {
		ps.Volumes[name] = policy.VolumeStats{UsedBytes: ptr(u.bytes), InodesUsed: ptr(u.inodes)}
	}
	if len(d.errs) > 0 {
		m.metrics.podReadErrors.WithLabelValues("disk").Add(float64(len(d.errs)))
	}
	// The pod's total is given only when every part of it was measured.
	if runtimeKnown && d.podLogs != nil && d.etcHosts != nil && len(d.errs) == 0 {
		total := d.podLogs.bytes + d.etcHosts.bytes
		complete := true
		for _, wl := range layers {
			if wl.bytes == nil {
				complete = false
				break
			}
			total += *wl.bytes
		}
		for name, u := range d.volumes {
			if !d.memoryBacked[name] {
				total += u.bytes
			}
		}
		if complete {
			ps.EphemeralStorageBytes = &total
		}
	}
	return d.errs
}

// logListing reads the pod log directory once per pass, and only if a pod
// without a name needs its log directory found by UID.
type logListing struct {
	dir     string
	log     *slog.Logger
	read    bool
	listing []os.DirEntry
}

func (l *logListing) entries() []os.DirEntry {
	if !l.read {
		l.read = true
		var err error
		l.listing, err = os.ReadDir(l.dir)
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			l.log.Warn("listing pod log directories", "dir", l.dir, "err", err)
		}
	}
	return l.listing
}

// refreshDisk re-measures every known pod's logs and volumes and re-reads
// writable layers: the housekeeping half of the per-pod stats.
func (m *Monitor) refreshDisk(ctx context.Context) {
	m.mu.Lock()
	pods := append([]PodRef(nil), m.pods...)
	m.mu.Unlock()
	if m.cfg.Runtime != nil {
		m.refreshLayers(ctx)
	}
	listing, err := os.ReadDir(m.walker.podLogsDir)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		m.log.Warn("listing pod log directories", "dir", m.walker.podLogsDir, "err", err)
	}
	fresh := make(map[types.UID]podDisk, len(pods))
	for _, pod := range pods {
		if ctx.Err() != nil {
			return
		}
		fresh[pod.UID] = m.walker.measure(pod, listing)
	}
	m.mu.Lock()
	m.disk = fresh
	m.mu.Unlock()
}

func (m *Monitor) refreshLayers(ctx context.Context) {
	cctx, cancel := context.WithTimeout(ctx, m.cfg.RuntimeTimeout)
	defer cancel()
	layers, ids, err := readWritableLayers(cctx, m.cfg.Runtime)
	m.noteRuntime("ListContainerStats", err)
	if err != nil {
		m.mu.Lock()
		m.layers = nil
		m.layersRead = true
		m.mu.Unlock()
		return
	}
	m.mu.Lock()
	m.layers = layers
	m.layersRead = true
	m.containers = ids
	m.mu.Unlock()
}

// noteRuntime counts a failed CRI call and logs when a call starts or stops
// failing, not on every pass.
func (m *Monitor) noteRuntime(call string, err error) {
	m.mu.Lock()
	wasFailing := m.runtimeFailing[call]
	m.runtimeFailing[call] = err != nil
	m.mu.Unlock()
	switch {
	case err != nil:
		m.metrics.runtimeErrors.WithLabelValues(call).Inc()
		if !wasFailing {
			m.log.Warn("CRI call failed: its readings are missing or fall back until it answers", "call", call, "err", err)
		}
	case wasFailing:
		m.log.Info("CRI call answers again", "call", call)
	}
}

func ptr(v int64) *int64 { return &v }
