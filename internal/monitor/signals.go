package monitor

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"golang.org/x/sys/unix"

	"github.com/evictiond/evictiond/internal/nodefs"
	"github.com/evictiond/evictiond/internal/policy"
)

// Node signals, one reader each: memory (root cgroup and kubepods), PSI,
// PIDs and filesystems. Each observation carries the time it was read.

func (m *Monitor) readMemorySignals(b *snapshotBuilder) {
	mi, err := readMeminfo(m.files, m.procDir)
	if err != nil {
		b.miss(policy.SignalMemoryAvailable, err.Error(), true)
		b.miss(policy.SignalSwapAvailable, err.Error(), true)
	} else {
		m.readMemoryAvailable(b, mi)
		readSwapAvailable(b, mi)
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
		u, err := m.cgl().readRootMemcgUsage()
		if err != nil {
			b.miss(policy.SignalMemoryAvailable, err.Error(), true)
			return
		}
		ws := u.workingSet()
		pool, err := m.hugetlb.read(m.files)
		if err != nil {
			b.miss(policy.SignalMemoryAvailable, err.Error(), true)
			return
		}
		// The hugetlb pools are counted as used: the kubelet's formula leaves them
		// available (MemTotal includes them, no cgroup's usage does).
		b.add(policy.SignalMemoryAvailable, mi.memTotal-ws-pool, mi.memTotal, time.Now(), SourceCgroupWorkingSet,
			fmt.Sprintf("MemTotal %d - root working set %d (usage %d - inactive_file %d) - hugetlb pools %d", mi.memTotal, ws, u.usage, u.inactiveFile, pool))
	}
}

// readSwapAvailable is SwapFree of SwapTotal. A node without swap has no
// swap.available at all (not "0 bytes left"), so a threshold on it never
// evicts there.
func readSwapAvailable(b *snapshotBuilder, mi meminfo) {
	switch {
	case mi.swapTotal < 0 || mi.swapFree < 0:
		b.miss(policy.SignalSwapAvailable, "the kernel's meminfo has no SwapTotal/SwapFree (built without swap)", false)
	case mi.swapTotal == 0:
		b.miss(policy.SignalSwapAvailable, "the node has no swap (SwapTotal 0)", false)
	default:
		b.add(policy.SignalSwapAvailable, mi.swapFree, mi.swapTotal, time.Now(), SourceMemInfoSwap,
			fmt.Sprintf("SwapFree %d of SwapTotal %d", mi.swapFree, mi.swapTotal))
	}
}

// readAllocatableMemory is the kubepods cgroup's limit minus its working
// set. Without a limit (enforceNodeAllocatable lacks "pods") the kubelet has
// no such signal, and neither does evictiond.
func (m *Monitor) readAllocatableMemory(b *snapshotBuilder) {
	sig := policy.SignalAllocatableMemoryAvailable
	l, info := m.cgl(), m.CgroupInfo()
	if !info.KubepodsFound {
		if _, err := os.Stat(l.dir("memory", l.kubepods)); err != nil {
			b.miss(sig, kubepodsPendingReason(info), false)
			return
		}
	}
	limit, err := l.readMemoryLimit(l.kubepods)
	if err != nil {
		b.miss(sig, err.Error(), true)
		return
	}
	if limit >= nodefs.UnlimitedMemory {
		b.miss(sig, fmt.Sprintf("cgroup %s has no memory limit (the kubelet enforces node allocatable on pods only with enforceNodeAllocatable: [pods])", l.kubepods), false)
		return
	}
	u, err := l.readMemcgUsage(l.kubepods)
	if err != nil {
		b.miss(sig, err.Error(), true)
		return
	}
	ws := u.workingSet()
	b.add(sig, limit-ws, limit, time.Now(), SourceCgroupWorkingSet,
		fmt.Sprintf("%s limit %d - working set %d", l.kubepods, limit, ws))
}

func (m *Monitor) readPSI(b *snapshotBuilder) {
	node, err := readProcPSI(m.files, m.procDir)
	at := time.Now()
	if err != nil {
		for _, sig := range nodePSISignals {
			b.miss(sig, err.Error(), true)
		}
	} else {
		addPSI(b, node, nodePSISignals, at, SourceProcPSI)
	}
	l := m.cgl()
	if l.version != CgroupV2 {
		for _, sig := range allocatablePSISignals {
			b.miss(sig, "the kubepods cgroup's memory.pressure exists only on cgroup v2", false)
		}
		return
	}
	if info := m.CgroupInfo(); !info.KubepodsFound {
		if _, err := os.Stat(l.dir("memory", l.kubepods)); err != nil {
			for _, sig := range allocatablePSISignals {
				b.miss(sig, kubepodsPendingReason(info), false)
			}
			return
		}
	}
	pods, err := readPSIFile(m.files, filepath.Join(l.dir("memory", l.kubepods), "memory.pressure"))
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
	r, err := readPIDs(m.files, m.procDir)
	if err != nil {
		b.miss(policy.SignalPIDAvailable, err.Error(), true)
		return
	}
	at := time.Now()
	desc := fmt.Sprintf("min(pid_max, threads-max) %d - tasks %d", r.maxPID, r.running)
	left, limited, err := m.cgl().readPodsPIDsLeft(m.cgl().kubepods)
	if err == nil && limited {
		desc += fmt.Sprintf("; kubepods pids.max leaves pods %d", left)
	}
	b.add(policy.SignalPIDAvailable, r.maxPID-r.running, r.maxPID, at, SourceProcPIDs, desc)
	if err == nil && limited {
		// The nearer wall for the brake (kubelet systemReserved/kubeReserved pid).
		o := b.s.Observations[policy.SignalPIDAvailable]
		o.PodsLeft = &left
		b.s.Observations[policy.SignalPIDAvailable] = o
	}
}

// readFilesystemSignals reads nodefs from the filesystem holding the
// kubelet's root dir, and imagefs/containerfs from the filesystems the CRI
// names (falling back to cAdvisor's view of ImageFsDir).
func (m *Monitor) readFilesystemSignals(ctx context.Context, b *snapshotBuilder) {
	node := m.readNodeFs(b)

	image, container, ok := m.readRuntimeFs(ctx, b)
	if !ok {
		return
	}
	if node.Device != 0 {
		b.s.Layout = nodefs.Layout(node.Device, image.Device, container.Device)
	}
}

// readNodeFs reads nodefs (the filesystem of the kubelet's root dir) with one
// statfs: cheap enough for the fast poll.
func (m *Monitor) readNodeFs(b *snapshotBuilder) nodefs.Usage {
	node, err := nodefs.Statfs(m.nodeFs)
	if err != nil {
		b.miss(policy.SignalNodeFsAvailable, err.Error(), true)
		b.miss(policy.SignalNodeFsInodesFree, err.Error(), true)
		return node
	}
	m.addFs(b, "nodefs", m.cfg.KubeletRootDir, node, time.Now(), SourceStatfs, nil,
		policy.SignalNodeFsAvailable, policy.SignalNodeFsInodesFree)
	return node
}

// readRuntimeFs returns the imagefs and containerfs usage and reports their
// signals.
func (m *Monitor) readRuntimeFs(ctx context.Context, b *snapshotBuilder) (image, container nodefs.Usage, ok bool) {
	imageSigs := [2]policy.Signal{policy.SignalImageFsAvailable, policy.SignalImageFsInodesFree}
	containerSigs := [2]policy.Signal{policy.SignalContainerFsAvailable, policy.SignalContainerFsInodesFree}
	var criErr error
	if m.cfg.Runtime != nil {
		rfs, err := m.runtimeFilesystems(ctx)
		if err == nil {
			image, err = nodefs.Statfs(nodefs.HostPath(m.cfg.HostRoot, rfs.ImageMountpoint))
		}
		if err == nil {
			container, err = nodefs.Statfs(nodefs.HostPath(m.cfg.HostRoot, rfs.ContainerMountpoint))
		}
		if err == nil {
			at := time.Now()
			m.addFs(b, "imagefs", rfs.ImageMountpoint, image, at, SourceCRI, rfs.ImageUsed, imageSigs[0], imageSigs[1])
			m.addFs(b, "containerfs", rfs.ContainerMountpoint, container, at, SourceCRI, rfs.ContainerUsed, containerSigs[0], containerSigs[1])
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
		image, err = nodefs.Statfs(m.imageFs)
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

// runtimeFsAnswer is one answer of the CRI's ImageFsInfo.
type runtimeFsAnswer struct {
	fs  nodefs.RuntimeFilesystems
	err error
	at  time.Time
}

// runtimeFilesystems is the CRI's word on its filesystems for a pass: where
// they are mounted (each pass statfs's them itself, so their free bytes and
// inodes are fresh) and the bytes the runtime counts on them, which
// containerd itself recomputes only every 10 s. The answer is refreshed by
// the housekeeping goroutine (Start) every stats.housekeepingInterval, so a
// pass never waits on the runtime: a pass woken by the kernel at a memory
// crossing went through a gRPC round trip to containerd, two wake-ups of
// processes that compete for the CPU with the workload causing the
// pressure, before it could decide. It is read here only when no answer is
// that recent (the first pass; a monitor not started, as `evictiond
// observe`). While the refresher runs, an older answer is used as it is:
// a runtime starved of CPU answers late (on a busy node containerd took the
// whole RuntimeTimeout, 2 s, and a refresher that then also walked the pods'
// disks let the answer age past the interval), and a pass that asked it
// again waited those 2 s between a memory crossing and its freeze (make
// bench-ramp, busy setups with the host's CPUs taken). A failed answer is
// kept too: the pass falls back without waiting on a runtime that hangs.
func (m *Monitor) runtimeFilesystems(ctx context.Context) (nodefs.RuntimeFilesystems, error) {
	m.mu.Lock()
	a, refreshed := m.runtimeFs, m.refreshing
	m.mu.Unlock()
	if a.at.IsZero() || !refreshed && time.Since(a.at) > m.cfg.HousekeepingInterval+m.cfg.RuntimeTimeout {
		a = m.refreshRuntimeFs(ctx)
	}
	return a.fs, a.err
}

// refreshRuntimeFs asks the CRI for its filesystems and keeps the answer.
func (m *Monitor) refreshRuntimeFs(ctx context.Context) runtimeFsAnswer {
	if m.cfg.Runtime == nil {
		return runtimeFsAnswer{}
	}
	cctx, cancel := context.WithTimeout(ctx, m.cfg.RuntimeTimeout)
	rfs, err := nodefs.ReadRuntimeFilesystems(cctx, m.cfg.Runtime)
	cancel()
	m.noteRuntime("ImageFsInfo", err)
	a := runtimeFsAnswer{fs: rfs, err: err, at: time.Now()}
	m.mu.Lock()
	m.runtimeFs = a
	m.mu.Unlock()
	return a
}

// cadvisorFs reads a directory's filesystem through cAdvisor, as the kubelet
// does, with the time of cAdvisor's reading; inode counts are missing when
// cAdvisor has none (e.g. some overlay or network filesystems).
func (m *Monitor) cadvisorFs(dir string) (nodefs.Usage, time.Time, error) {
	fi, err := m.cadvisor.dirFsInfo(dir)
	if err != nil {
		return nodefs.Usage{}, time.Time{}, err
	}
	var st unix.Stat_t
	if err := unix.Stat(dir, &st); err != nil {
		return nodefs.Usage{}, time.Time{}, fmt.Errorf("stat %s: %w", dir, err)
	}
	u := nodefs.Usage{Device: st.Dev, Capacity: int64(fi.Capacity), Available: int64(fi.Available), Inodes: -1, InodesFree: -1}
	if fi.Inodes != nil && fi.InodesFree != nil {
		u.Inodes, u.InodesFree = int64(*fi.Inodes), int64(*fi.InodesFree)
	}
	return u, fi.Timestamp, nil
}

func (m *Monitor) addFs(b *snapshotBuilder, role, path string, u nodefs.Usage, at time.Time, src Source, used *int64, bytesSig, inodesSig policy.Signal) {
	b.s.Filesystems = append(b.s.Filesystems, Filesystem{
		Role: role, Path: path, Device: fmt.Sprintf("%d:%d", unix.Major(u.Device), unix.Minor(u.Device)),
		Capacity: u.Capacity, Available: u.Available, Inodes: u.Inodes, InodesFree: u.InodesFree,
		UsedByRuntime: used, Source: src,
	})
	b.add(bytesSig, u.Available, u.Capacity, at, src, role+" "+path)
	if u.Inodes < 0 {
		b.miss(inodesSig, role+" "+path+": no inode counts", true)
		return
	}
	b.add(inodesSig, u.InodesFree, u.Inodes, at, src, role+" "+path)
}

// kubepodsPendingReason is why the kubepods signals are missing before the
// kubelet has created kubepods: not a failed read.
func kubepodsPendingReason(i CgroupInfo) string {
	return fmt.Sprintf("no kubepods cgroup yet at %s (cgroup driver %s from %s, provisional): the kubelet has not created it; detected again every pass", i.Kubepods, i.Driver, i.DriverFrom)
}
