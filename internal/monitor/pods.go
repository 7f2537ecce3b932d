package monitor

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"strings"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/evictiond/evictiond/internal/policy"
)

// Per-pod usage: memory working set and process counts fresh from the pod
// cgroup, container names and writable layers from the CRI, logs and local
// volumes from the housekeeping cache of bounded walks.

// DiscoverPods lists the pods that have a cgroup under kubepods, for when no
// pod list is at hand; their names are unknown.
func (m *Monitor) DiscoverPods() ([]PodRef, error) {
	m.redetect()
	found, err := m.cgl().discoverPods()
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
		p, err := m.cgl().podCgroupPath(pod.runtimeUID(), qos)
		if err != nil {
			return "", err
		}
		if len(tiers) == 1 {
			return p, nil // a missing cgroup shows as a failed read of it
		}
		if _, err := os.Stat(m.cgl().dir("memory", p)); err == nil {
			return p, nil
		}
	}
	want, _ := m.cgl().podCgroupPath(pod.runtimeUID(), pod.QOSClass)
	if want == "" {
		want = "any QoS tier under " + m.cgl().kubepods
	}
	return "", fmt.Errorf("pod %s: no cgroup at %s: %w", pod.UID, want, fs.ErrNotExist)
}

// readPods fills s with the pods' usage; withCgroups false reads only the
// disk usage (from the housekeeping cache) and leaves memory and processes
// unmeasured.
func (m *Monitor) readPods(ctx context.Context, s *Snapshot, pods []PodRef, withCgroups bool) {
	m.mu.Lock()
	m.pods = append(m.pods[:0], pods...)
	needLayers := m.cfg.Runtime != nil && !m.layersRead
	m.mu.Unlock()
	if needLayers {
		m.refreshLayers(ctx)
	}
	logs := &logListing{dir: m.walker.podLogsDir, log: m.log}
	podPSI := m.podsMayStall(s)
	if len(s.Pods) == 0 {
		s.Pods = make(policy.PodStatsByUID, len(pods)) // sized once, not grown pod by pod
	}
	for _, pod := range pods {
		// Containers and Volumes are made when a figure goes in (setContainer;
		// addDiskUsage's volumes): an idle pass's pods mostly have none to add.
		var ps policy.PodStats
		var errs []string
		if !withCgroups {
			ps.Time = time.Now()
			if !podPSI {
				// no pod stalled: nothing to read
			} else if cg, err := m.locatePod(pod); err == nil {
				ps.MemoryPressure = m.readPodPressure(cg)
			}
			errs = append(errs, m.addDiskUsage(pod, &ps, logs, false)...)
			s.Pods[pod.UID] = ps
			if len(errs) > 0 {
				s.PodErrors[pod.UID] = strings.Join(errs, "; ")
			}
			continue
		}
		cg, err := m.locatePod(pod)
		var u memcgUsage
		if err == nil {
			u, err = m.cgl().readMemcgUsage(cg)
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
			ps.MemoryPressure = m.readPodPressure(cg)
			ws, file := u.workingSet(), u.file
			ps.MemoryWorkingSet = &ws
			if file >= 0 {
				ps.MemoryFile = &file
			}
			ps.MemorySwap = m.cgl().readSwapUsage(cg)
			if n, err := m.cgl().countProcesses(cg); err != nil {
				errs = append(errs, err.Error())
				m.metrics.podReadErrors.WithLabelValues("processes").Inc()
			} else {
				ps.Processes = &n
			}
			if n, err := m.cgl().countTasks(cg); err == nil {
				ps.Tasks = &n
			} // no pids controller: PID ranking falls back to processes
			m.readContainerMemory(cg, pod.runtimeUID(), &ps)
		}
		ps.Time = time.Now()
		errs = append(errs, m.addDiskUsage(pod, &ps, logs, true)...)
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
	entries, err := os.ReadDir(m.cgl().dir("memory", podCgroup))
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
		u, err := m.cgl().readMemcgUsage(podCgroup + "/" + e.Name())
		if err != nil {
			m.metrics.podReadErrors.WithLabelValues("containerMemory").Inc()
			continue
		}
		ws := u.workingSet()
		cs := ps.Containers[cn.name]
		cs.MemoryWorkingSet = &ws
		setContainer(ps, cn.name, cs)
	}
}

// addDiskUsage fills logs, writable layers and local volumes from the
// refresher's cache, measuring a pod the cache has not seen yet. For ranking,
// a pod the cache saw before any of its containers had logged (a new pod,
// measured while it started) is measured again: its logs and volumes are
// cheap to read then, and without them it would have no disk stats at all,
// which ranks it first for disk pressure (the kubelet's rule) — a pod
// started seconds before the crossing would go before the one filling the
// disk (make bench-ramp, setups disk*).
func (m *Monitor) addDiskUsage(pod PodRef, ps *policy.PodStats, logs *logListing, ranking bool) []string {
	m.mu.Lock()
	d, ok := m.disk[pod.UID]
	layers := m.layers[pod.runtimeUID()]
	runtimeKnown := m.cfg.Runtime != nil && m.layers != nil
	layersGen := m.layersGen
	m.mu.Unlock()
	if ok && !ranking && d.built != nil && d.built.layersGen == layersGen {
		// The same figures as the pass before: its maps again, not new ones.
		ps.Containers, ps.Volumes, ps.EphemeralStorageBytes = d.built.containers, d.built.volumes, d.built.total
		if len(d.errs) > 0 {
			m.metrics.podReadErrors.WithLabelValues("disk").Add(float64(len(d.errs)))
		}
		return d.errs
	}
	if ok && ranking && len(d.containerLogs) == 0 {
		ok = false
	}
	// Ranking near a filesystem threshold uses figures no older than one
	// housekeeping interval: the refresher may have skipped the pod while the
	// filesystems were far (diskpace.go).
	if ok && ranking && !m.fsFar.Load() && time.Since(d.time) > m.cfg.HousekeepingInterval {
		ok = false
	}
	if !ok {
		d = m.walker.measure(pod, logs.forPod(pod))
		m.mu.Lock()
		m.disk[pod.UID] = d
		m.mu.Unlock()
	}
	for name, u := range d.containerLogs {
		cs := ps.Containers[name]
		cs.LogsBytes, cs.LogsInodes = ptr(u.bytes), ptr(u.inodes)
		setContainer(ps, name, cs)
	}
	for name, wl := range layers {
		cs := ps.Containers[name]
		cs.RootfsBytes, cs.RootfsInodes = wl.bytes, wl.inodes
		setContainer(ps, name, cs)
	}
	for name, u := range d.volumes {
		if ps.Volumes == nil {
			ps.Volumes = make(map[string]policy.VolumeStats, len(d.volumes))
		}
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
	if !ranking {
		m.mu.Lock()
		if cur, ok := m.disk[pod.UID]; ok && cur.time.Equal(d.time) {
			cur.built = &builtDisk{layersGen: layersGen, containers: ps.Containers, volumes: ps.Volumes, total: ps.EphemeralStorageBytes}
			m.disk[pod.UID] = cur
		}
		m.mu.Unlock()
	}
	return d.errs
}

// builtDisk is a pod's disk figures as an idle pass gave them, kept with the
// measurement they came from: the next idle pass gives the same maps again
// while neither the measurement nor the writable layers changed (an idle pass
// at 110 pods built 110 pods' maps a second, a quarter of what the idle agent
// allocated). The maps are never written after they are built: a pass that
// ranks builds its own.
type builtDisk struct {
	layersGen  uint64
	containers map[string]policy.ContainerStats
	volumes    map[string]policy.VolumeStats
	total      *int64
}

// setContainer stores a container's figures, making the pod's map on the first.
func setContainer(ps *policy.PodStats, name string, cs policy.ContainerStats) {
	if ps.Containers == nil {
		ps.Containers = map[string]policy.ContainerStats{}
	}
	ps.Containers[name] = cs
}

// podsMayStall says whether a pass must read the pods' memory.pressure (cgroup
// v2; three files a pod, 3 ms of CPU a pass at 110 pods on the fixture node):
// not while the kubepods cgroup's own some avg10 reads 0.00. PSI is
// hierarchical, a task stalled in a pod is stalled in kubepods on the same CPU,
// so no pod can then show the stall policy.AssessPodPressure looks for (its
// some avg10 above zero), nor the livelock check's (its full avg10 at or above
// livelock.fullStall, above zero), short of a pod's stall averaged over kubepods' busier
// CPUs rounding below 0.005%. Unknown kubepods pressure reads the pods.
func (m *Monitor) podsMayStall(s *Snapshot) bool {
	if m.cgl().version != CgroupV2 {
		return false // readPodPressure has nothing to read on v1
	}
	o, ok := s.Observations[policy.SignalAllocatableMemoryPSISomeAvg10]
	return !ok || o.Available < policy.PSIScale
}

// logListing reads the pod log directory once per pass, and only if a pod
// without a name needs its log directory found by UID.
type logListing struct {
	dir     string
	log     *slog.Logger
	read    bool
	listing []os.DirEntry
}

// forPod is the listing measuring pod needs: none for a pod with a name (its
// log directory is named after it).
func (l *logListing) forPod(pod PodRef) []os.DirEntry {
	if pod.Namespace != "" && pod.Name != "" {
		return nil
	}
	return l.entries()
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

// refreshDisk re-measures the known pods' logs and volumes and re-reads
// writable layers: the housekeeping half of the per-pod stats. Every pod while
// a filesystem signal is near a threshold or the last full walk is an idle
// walk old, else only the pods with a local-storage limit (diskpace.go); the
// others keep their last figures.
func (m *Monitor) refreshDisk(ctx context.Context) {
	m.mu.Lock()
	pods := append([]PodRef(nil), m.pods...)
	old := m.disk
	m.mu.Unlock()
	now := time.Now()
	// A tick a little early (the ticker's, the walk's own time) still counts.
	full := !m.fsFar.Load() || now.Sub(m.lastFullWalk) >= m.idleWalk()-m.cfg.HousekeepingInterval/2
	if full {
		m.lastFullWalk = now
	}
	if m.cfg.Runtime != nil {
		m.refreshLayers(ctx)
	}
	logs := &logListing{dir: m.walker.podLogsDir, log: m.log}
	fresh := make(map[types.UID]podDisk, len(pods))
	for _, pod := range pods {
		if ctx.Err() != nil {
			return
		}
		if d, ok := old[pod.UID]; ok && !full && !pod.LocalStorageLimited {
			fresh[pod.UID] = d
			continue
		}
		fresh[pod.UID] = m.walker.measure(pod, logs.forPod(pod))
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
		m.layersGen++
		m.layersRead = true
		m.mu.Unlock()
		return
	}
	m.mu.Lock()
	m.layers = layers
	m.layersGen++
	m.layersRead = true
	m.containers = ids
	m.mu.Unlock()
}
