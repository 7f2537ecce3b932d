package monitor

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/types"

	"github.com/evictiond/evictiond/internal/nodefs"
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

	// CgroupDriver is the kubelet's: cgroupfs, systemd, or auto (the
	// default, "") to detect it (detect.go). An explicit driver that the node
	// contradicts is an error in New.
	CgroupDriver CgroupDriver
	// CgroupRoot is the kubelet's --cgroup-root; default: the kubelet
	// configuration's cgroupRoot, else "/".
	CgroupRoot    string
	CgroupVersion CgroupVersion // default: detected from the mount
	// KubeletConfigFile is the kubelet's configuration file (a host path; its
	// cgroupDriver and cgroupRoot help detection before kubepods exists).
	// Empty: none is read. The commands default it to DefaultKubeletConfigFile.
	KubeletConfigFile string
	// RuntimeEndpoint is the CRI socket Runtime was dialed at and how it was
	// chosen, for the start-up log line and evictiond_node_info.
	RuntimeEndpoint RuntimeEndpoint

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
	// reads statfs directly. It starts only without a Runtime (or with
	// CAdvisorWatchPods) anyway: see Start.
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
	def(&c.KubeletRootDir, nodefs.DefaultKubeletRootDir)
	def(&c.PodLogsDir, nodefs.DefaultPodLogsDir)
	def(&c.ImageFsDir, nodefs.DefaultImageFsDir)
	if c.CgroupDriver == "" {
		c.CgroupDriver = CgroupDriverAuto
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
	cfg Config
	log *slog.Logger
	// current is the cgroup layout in use; it is replaced once, when a
	// provisional layout (no kubepods yet) is settled by redetect.
	current  atomic.Pointer[detected]
	detectIn detectInput
	// detectMu serialises redetect; detectFailing logs a failing detection once.
	detectMu      sync.Mutex
	detectFailing bool
	procDir       string
	// files keeps the node-level files the poll and the pass read every
	// second open (keepOpen), those in keepProcDirs among them.
	files        *nodefs.Files
	keepProcDirs []string
	hugetlb      *hugetlbPools
	nodeFs       string
	imageFs      string
	walker       diskWalker
	metrics      *metrics
	cadvisor     *embeddedCAdvisor

	mu         sync.Mutex
	pods       []PodRef
	disk       map[types.UID]podDisk
	layers     map[types.UID]map[string]writableLayer
	containers map[string]containerName // CRI container ID -> pod and name
	layersRead bool
	// layersGen counts the writable layers' refreshes (builtDisk).
	layersGen uint64
	// runtimeFs is the CRI's last answer on its filesystems (see
	// runtimeFilesystems).
	runtimeFs runtimeFsAnswer
	// refreshing: Start's refresher keeps runtimeFs (and the pods' disk
	// usage) fresh, so a pass never asks the runtime itself once it has an
	// answer.
	refreshing bool
	// runtimeFailing is which CRI calls failed last time, to log transitions.
	runtimeFailing map[string]bool
	// fsThresholds pace the disk refresher (diskpace.go); fsFar says the last
	// pass found every filesystem signal far from them (false until then);
	// lastFullWalk is when the refresher last measured every pod (its
	// goroutine's own).
	fsThresholds    []policy.Threshold
	fsThresholdsSet bool
	fsFar           atomic.Bool
	lastFullWalk    time.Time

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
	procDir := nodefs.HostPath(cfg.HostRoot, cfg.ProcDir)
	if fi, err := os.Stat(procDir); err != nil || !fi.IsDir() {
		return nil, fmt.Errorf("opening procfs at %s: not a directory (%v)", procDir, err)
	}
	driver, err := ParseCgroupDriver(string(cfg.CgroupDriver))
	if err != nil {
		return nil, err
	}
	log := cfg.Logger.With("component", "monitor")
	in := detectInput{mountDir: nodefs.HostPath(cfg.HostRoot, cfg.CgroupDir), version: cfg.CgroupVersion, driver: driver,
		cgroupRoot: cfg.CgroupRoot, systemdRunning: systemdRunning(cfg.HostRoot)}
	// A hint only: unreadable, it is logged and detection goes on without it.
	if in.kubelet, err = readKubeletConfig(cfg.HostRoot, cfg.KubeletConfigFile); err != nil {
		log.Warn("kubelet configuration not used for detection", "err", err)
	}
	if cfg.Runtime != nil {
		ctx, cancel := context.WithTimeout(context.Background(), cfg.RuntimeTimeout)
		in.criDriver, err = criCgroupDriver(ctx, cfg.Runtime)
		cancel()
		if err != nil {
			log.Info("the runtime did not say its cgroup driver", "err", err)
		}
	}
	det, err := detectLayout(in)
	if err != nil {
		return nil, err
	}
	m := &Monitor{
		cfg:          cfg,
		log:          log,
		detectIn:     in,
		procDir:      procDir,
		hugetlb:      newHugetlbPools(cfg.HostRoot),
		keepProcDirs: []string{procDir + "/", procDir + "/sys/kernel/", procDir + "/pressure/"},
		nodeFs:       nodefs.HostPath(cfg.HostRoot, cfg.KubeletRootDir),
		imageFs:      nodefs.HostPath(cfg.HostRoot, cfg.ImageFsDir),
		walker: diskWalker{
			kubeletRootDir: nodefs.HostPath(cfg.HostRoot, cfg.KubeletRootDir),
			podLogsDir:     nodefs.HostPath(cfg.HostRoot, cfg.PodLogsDir),
			maxEntries:     cfg.MaxWalkEntries,
		},
		metrics:        newMetrics(cfg.SignalReadErrors),
		disk:           map[types.UID]podDisk{},
		containers:     map[string]containerName{},
		runtimeFailing: map[string]bool{},
	}
	m.files = nodefs.NewFiles(m.keepOpen)
	// A Monitor dropped without Stop (tests, simulate's checks) closes its files when collected.
	runtime.AddCleanup(m, func(f *nodefs.Files) { f.Close() }, m.files)
	m.store(&det)
	m.metrics.setNodeInfo(det.info, cfg.RuntimeEndpoint)
	m.logDetected(det, "node detected")
	return m, nil
}

// cgl is the cgroup layout in use.
func (m *Monitor) cgl() *cgroupLayout { return m.current.Load().layout }

// store makes d the layout in use, reading through the monitor's files.
func (m *Monitor) store(d *detected) {
	l := d.layout
	l.files = m.files
	l.keepDirs = []string{l.dir("memory", "/") + "/", l.dir("memory", l.kubepods) + "/", l.dir("pids", l.kubepods) + "/"}
	m.current.Store(d)
}

// keepOpen names the files kept open: the node-level ones the fast poll and
// every pass read (procfs's meminfo, loadavg, pid_max, threads-max and
// memory pressure; the hugetlb pools; the root memory cgroup's and the
// kubepods cgroup's own files). A pod's files are opened at each read: pods
// come and go, and ranking reads them only under pressure.
func (m *Monitor) keepOpen(path string) bool {
	dir, _ := filepath.Split(path)
	if slices.Contains(m.keepProcDirs, dir) || strings.HasPrefix(dir, m.hugetlb.prefix) {
		return true
	}
	return slices.Contains(m.cgl().keepDirs, dir)
}

// logDetected is the one line that says what the monitor reads and why.
func (m *Monitor) logDetected(d detected, msg string) {
	i, rt := d.info, m.cfg.RuntimeEndpoint
	m.log.Info(msg, "cgroupVersion", int(i.Version), "cgroupVersionFrom", i.VersionFrom, "cgroupDriver", string(i.Driver),
		"cgroupDriverFrom", i.DriverFrom, "kubepods", i.Kubepods, "kubepodsFound", i.KubepodsFound, "cgroupRoot", i.CgroupRoot,
		"runtimeEndpoint", rt.Endpoint, "runtime", rt.Runtime, "runtimeFrom", rt.From)
	for _, w := range d.warnings {
		m.log.Warn("cgroup driver hint ignored", "hint", w)
	}
	if !i.KubepodsFound {
		m.log.Warn("no kubepods cgroup yet (the kubelet has not created it): the layout is provisional and detected again on every pass until it exists",
			"kubepods", i.Kubepods, "cgroupDriverFrom", i.DriverFrom, "mount", m.detectIn.mountDir)
	}
}

// redetect settles a provisional layout once the kubelet has created
// kubepods: called on every pass (ObserveNode, DiscoverPods), it costs two
// stat calls while kubepods is missing and nothing once found.
func (m *Monitor) redetect() {
	if m.current.Load().info.KubepodsFound {
		return
	}
	m.detectMu.Lock()
	defer m.detectMu.Unlock()
	cur := m.current.Load()
	if cur.info.KubepodsFound {
		return
	}
	next, err := detectLayout(m.detectIn)
	if err != nil {
		if !m.detectFailing {
			m.log.Error("cgroup layout detection fails; keeping the provisional layout, pods under it are not found", "kubepods", cur.info.Kubepods, "err", err)
		}
		m.detectFailing = true
		return
	}
	m.detectFailing = false
	if !next.info.KubepodsFound {
		return
	}
	if next.info.Driver != cur.info.Driver || next.info.Kubepods != cur.info.Kubepods {
		m.log.Warn("kubepods cgroup found under another layout than the provisional one: switching", "was", cur.info.Kubepods, "wasFrom", cur.info.DriverFrom)
	}
	m.store(&next)
	m.metrics.setNodeInfo(next.info, m.cfg.RuntimeEndpoint)
	m.logDetected(next, "kubepods cgroup found")
}

// Collectors are the monitor's Prometheus metrics, for the daemon to register.
func (m *Monitor) Collectors() []prometheus.Collector {
	return m.metrics.collectors(m.cfg.SignalReadErrors == nil)
}

// CgroupInfo says which hierarchy is read and how it was detected.
func (m *Monitor) CgroupInfo() CgroupInfo { return m.current.Load().info }

// Start starts the embedded cAdvisor (unless disabled, or not needed) and the
// refresher of per-pod disk usage, until Stop or ctx ends. With a CRI to ask,
// cAdvisor is not started unless CAdvisorWatchPods: the one figure evictiond
// would read from it, imagefs while the CRI does not answer, is then a statfs
// of ImageFsDir (the same filesystem's figures, read at the pass rather than
// at cAdvisor's last housekeeping), and its housekeeping of the root
// filesystems every interval (6% of the idle agent's CPU) would feed nothing.
func (m *Monitor) Start(ctx context.Context) error {
	if !m.cfg.DisableCAdvisor && (m.cfg.Runtime == nil || m.cfg.CAdvisorWatchPods) {
		var watch []string
		if m.cfg.CAdvisorWatchPods {
			watch = []string{m.cgl().kubepods}
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
	m.mu.Lock()
	m.refreshing = true
	m.mu.Unlock()
	go func() {
		defer close(m.refreshDone)
		defer func() {
			m.mu.Lock()
			m.refreshing = false
			m.mu.Unlock()
		}()
		t := time.NewTicker(m.cfg.HousekeepingInterval)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				m.refreshRuntimeFs(ctx)
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
	m.files.Close()
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
		Readings:      make([]SignalReading, 0, len(policy.Signals())), // one allocation, not one per doubling
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

// ObserveFast reads the memory signals, pid.available and nodefs: what the
// brake races on and the fast poll watches, from cgroupfs, /proc and one
// statfs (no CRI call, no pod cgroup); well under a millisecond.
func (m *Monitor) ObserveFast() *Snapshot {
	s, b := newSnapshot(m)
	m.readMemorySignals(b)
	m.readPIDSignal(b)
	m.readNodeFs(b)
	return s
}

// Observe reads every signal and the usage of the given pods: ObserveNode and
// ObservePods in one snapshot.
func (m *Monitor) Observe(ctx context.Context, pods []PodRef) *Snapshot {
	s := m.ObserveNode(ctx)
	m.readPods(ctx, s, pods, true)
	return s
}

// ObserveNode reads every node signal (memory, PID, PSI, filesystems) and the
// filesystem layout, without per-pod usage: what each pass of the loop needs
// while no threshold is met.
func (m *Monitor) ObserveNode(ctx context.Context) *Snapshot {
	m.redetect()
	s, b := newSnapshot(m)
	m.readMemorySignals(b)
	m.readPIDSignal(b)
	m.readFilesystemSignals(ctx, b)
	m.noteFilesystems(s.Observations)
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
	m.readPods(ctx, s, pods, true)
}

// ObservePodDisk adds only the pods' disk usage (writable layers, logs, local
// volumes, all from the housekeeping cache: no cgroup reads), which the
// local-storage limit checks need on every pass; ObservePods then adds memory
// and processes when pods must be ranked. Memory and process fields stay nil
// (unmeasured) until then.
func (m *Monitor) ObservePodDisk(ctx context.Context, s *Snapshot, pods []PodRef) {
	m.readPods(ctx, s, pods, false)
}

func signalOrder(sig policy.Signal) int {
	for i, s := range policy.Signals() {
		if s == sig {
			return i
		}
	}
	return len(policy.Signals())
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
