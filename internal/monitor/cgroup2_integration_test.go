//go:build integration && cgroup2

package monitor

// cgroup v2 twins of the cgroup v1 tests, run by `make test-cgroup2` inside a
// VM booted with cgroup v2 only (internal/testenv/vm): kubepods at the root of
// the real unified hierarchy, laid out as the kubelet's cgroupfs or systemd
// driver does, pods as real processes in container cgroups, and what the
// monitor reads compared with the kernel's own files.

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/evictiond/evictiond/internal/policy"
	"github.com/evictiond/evictiond/internal/testenv/vm"
)

const v2Mount = "/sys/fs/cgroup"

func requireCgroupV2(t testing.TB) { t.Helper(); vm.RequireCgroup2(t, "memory", "pids") }

// v2Tree is a kubepods hierarchy in the unified hierarchy, removed (with its
// processes) when the test ends. Inner cgroups delegate memory and pids to
// their children; processes live only in leaves, as runc puts them.
type v2Tree struct {
	t      testing.TB
	dirs   []string
	procs  []*exec.Cmd
	stdins []io.WriteCloser
}

func newV2Tree(t testing.TB) *v2Tree {
	tr := &v2Tree{t: t}
	t.Cleanup(tr.remove)
	return tr
}

// mkdir creates cgroup cg (a path in the hierarchy) and, with inner, delegates
// memory and pids to its children.
func (tr *v2Tree) mkdir(cg string, inner bool) string {
	tr.t.Helper()
	dir := filepath.Join(v2Mount, cg)
	if err := os.Mkdir(dir, 0o755); err != nil {
		tr.t.Fatalf("creating cgroup %s: %v", dir, err)
	}
	tr.dirs = append(tr.dirs, dir)
	if inner {
		if err := os.WriteFile(filepath.Join(dir, "cgroup.subtree_control"), []byte("+memory +pids"), 0o644); err != nil {
			tr.t.Fatalf("delegating memory and pids in %s: %v", dir, err)
		}
	}
	return dir
}

// start runs a process holding mib MiB of touched anonymous memory in cg.
func (tr *v2Tree) start(cg string, mib int) {
	tr.t.Helper()
	cmd, stdin := startChild(tr.t, mib, filepath.Join(v2Mount, cg, "cgroup.procs"))
	tr.procs = append(tr.procs, cmd)
	tr.stdins = append(tr.stdins, stdin)
}

// writeCache writes mib MiB to a new file on the VM's block filesystem from a
// process in cg: real page cache (file, inactive_file) charged to cg.
func (tr *v2Tree) writeCache(cg string, mib int) {
	tr.t.Helper()
	file := filepath.Join(vm.DiskMount, strings.NewReplacer("/", "_", ".", "_").Replace(cg))
	procs := filepath.Join(v2Mount, cg, "cgroup.procs")
	script := fmt.Sprintf("echo $$ > %s && exec dd if=/dev/zero of=%s bs=1M count=%d 2>/dev/null", procs, file, mib)
	if out, err := exec.Command("/bin/sh", "-c", script).CombinedOutput(); err != nil {
		tr.t.Fatalf("writing %d MiB of page cache in %s (needs the VM's disk at %s): %v %s", mib, cg, vm.DiskMount, err, out)
	}
	tr.t.Cleanup(func() { _ = os.Remove(file) })
}

func (tr *v2Tree) remove() {
	stopChildren(tr.procs, tr.stdins)
	removeCgroupDirs(tr.t, tr.dirs)
}

func v2MonitorConfig(t testing.TB) Config {
	return Config{
		CgroupDriver:         CgroupDriverCgroupfs,
		KubeletRootDir:       t.TempDir(),
		PodLogsDir:           t.TempDir(),
		ImageFsDir:           t.TempDir(),
		DisableCAdvisor:      true,
		HousekeepingInterval: time.Second,
	}
}

// kernelV2 reads a cgroup's memory.current and memory.stat inactive_file.
func kernelV2(t testing.TB, cg string) (current, inactiveFile int64) {
	t.Helper()
	dir := filepath.Join(v2Mount, cg)
	current = readIntFile(t, filepath.Join(dir, "memory.current"))
	return current, statKey(t, filepath.Join(dir, "memory.stat"), "inactive_file")
}

func statKey(t testing.TB, path, key string) int64 {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(raw), "\n") {
		if v, ok := strings.CutPrefix(line, key+" "); ok {
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				t.Fatalf("%s: %s: %v", path, key, err)
			}
			return n
		}
	}
	t.Fatalf("no %s in %s", key, path)
	return 0
}

// Pods in the cgroupfs driver's layout (kubepods/pod<uid>,
// kubepods/burstable/pod<uid>, kubepods/besteffort/pod<uid>), each with
// container cgroups: the working set is memory.current - inactive_file as the
// kernel reports it at the same moment, page cache excluded; processes are
// counted over the pod's subtree; tasks are pids.current (threads included).
func TestCgroup2PodsWorkingSetAndTasksCgroupfsLayout(t *testing.T) {
	requireCgroupV2(t)
	tree := newV2Tree(t)
	for _, cg := range []string{"/kubepods", "/kubepods/burstable", "/kubepods/besteffort"} {
		tree.mkdir(cg, true)
	}
	podA := types.UID("aaaaaaaa-0000-4000-8000-000000000001")
	podB := types.UID("bbbbbbbb-0000-4000-8000-000000000002")
	podC := types.UID("cccccccc-0000-4000-8000-000000000003")
	cgA := "/kubepods/burstable/pod" + string(podA)
	cgB := "/kubepods/pod" + string(podB)
	cgC := "/kubepods/besteffort/pod" + string(podC)
	for _, cg := range []string{cgA, cgB, cgC} {
		tree.mkdir(cg, true)
	}
	for _, cg := range []string{cgA + "/ctr1", cgA + "/ctr2", cgB + "/ctr", cgC + "/ctr"} {
		tree.mkdir(cg, false)
	}
	tree.start(cgA+"/ctr1", 64)
	tree.start(cgA+"/ctr1", 32)
	tree.start(cgA+"/ctr2", 0)
	tree.start(cgB+"/ctr", 160)
	tree.start(cgC+"/ctr", 0)
	// Pod C also wrote 64 MiB to a file: page cache, inactive, not working set.
	tree.writeCache(cgC+"/ctr", 64)

	m, err := New(v2MonitorConfig(t))
	if err != nil {
		t.Fatal(err)
	}
	if info := m.CgroupInfo(); info.Version != CgroupV2 || info.Kubepods != "/kubepods" {
		t.Fatalf("cgroup info %+v, want v2 with kubepods at /kubepods", info)
	}
	refs := []PodRef{
		{UID: podA, QOSClass: string(v1.PodQOSBurstable)},
		{UID: podB, QOSClass: string(v1.PodQOSGuaranteed)},
		{UID: podC}, // QoS unknown: found by trying each tier
	}
	const runtimeSlack = 12 * mib
	for _, tc := range []struct {
		uid       types.UID
		cg        string
		allocated int64
		processes int64
	}{{podA, cgA, 96 * mib, 3}, {podB, cgB, 160 * mib, 1}, {podC, cgC, 0, 1}} {
		curBefore, inBefore := kernelV2(t, tc.cg)
		s := m.Observe(context.Background(), refs)
		curAfter, inAfter := kernelV2(t, tc.cg)
		ps := s.Pods[tc.uid]
		if ps.MemoryWorkingSet == nil {
			t.Errorf("pod %s: no working set (%s)", tc.uid, s.PodErrors[tc.uid])
			continue
		}
		ws := *ps.MemoryWorkingSet
		lo, hi := min(curBefore-inBefore, curAfter-inAfter), max(curBefore-inBefore, curAfter-inAfter)
		t.Logf("pod %s: working set %.1f MiB; kernel: memory.current %.1f MiB, inactive_file %.1f MiB; %v processes, %v tasks",
			tc.uid, float64(ws)/mib, float64(curAfter)/mib, float64(inAfter)/mib, deref(ps.Processes), deref(ps.Tasks))
		if ws < lo-mib || ws > hi+mib {
			t.Errorf("pod %s working set %d, the kernel's memory.current - inactive_file is %d..%d", tc.uid, ws, lo, hi)
		}
		if ws < tc.allocated || ws > tc.allocated+tc.processes*runtimeSlack {
			t.Errorf("pod %s working set %d MiB, want %d MiB allocated + at most %d MiB runtime", tc.uid, ws/mib, tc.allocated/mib, tc.processes*runtimeSlack/mib)
		}
		if ps.Processes == nil || *ps.Processes != tc.processes {
			t.Errorf("pod %s processes %v, want %d", tc.uid, deref(ps.Processes), tc.processes)
		}
		pids := readIntFile(t, filepath.Join(v2Mount, tc.cg, "pids.current"))
		if ps.Tasks == nil || *ps.Tasks != pids || *ps.Tasks <= *ps.Processes {
			t.Errorf("pod %s tasks %v, want pids.current %d, more than its %v processes (threads)", tc.uid, deref(ps.Tasks), pids, deref(ps.Processes))
		}
		if got := s.PodCgroups[tc.uid].Path; got != tc.cg {
			t.Errorf("pod %s found at %q, want %q", tc.uid, got, tc.cg)
		}
	}
	if _, inactive := kernelV2(t, cgC); inactive < 32*mib {
		t.Errorf("pod C inactive_file %d MiB after writing 64 MiB to %s, want >= 32 MiB: the page cache is not charged as on a real node", inactive/mib, vm.DiskMount)
	}
}

// The systemd driver's layout: kubepods.slice/kubepods-burstable.slice/
// kubepods-burstable-pod<uid with _>.slice/cri-containerd-<id>.scope.
func TestCgroup2SystemdDriverLayout(t *testing.T) {
	requireCgroupV2(t)
	tree := newV2Tree(t)
	uid := types.UID("abcdef01-2345-4678-9abc-def012345678")
	kubepods := "/kubepods.slice"
	burstable := kubepods + "/kubepods-burstable.slice"
	besteffort := kubepods + "/kubepods-besteffort.slice"
	pod := burstable + "/kubepods-burstable-podabcdef01_2345_4678_9abc_def012345678.slice"
	ctr := pod + "/cri-containerd-" + strings.Repeat("ab", 32) + ".scope"
	for _, cg := range []string{kubepods, burstable, besteffort, pod} {
		tree.mkdir(cg, true)
	}
	tree.mkdir(ctr, false)
	tree.start(ctr, 48)
	tree.start(ctr, 0)
	tree.writeCache(ctr, 32)

	cfg := v2MonitorConfig(t)
	cfg.CgroupDriver = CgroupDriverSystemd
	m, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if m.CgroupInfo().Kubepods != kubepods {
		t.Fatalf("kubepods %q, want %q", m.CgroupInfo().Kubepods, kubepods)
	}
	found, err := m.DiscoverPods()
	if err != nil || len(found) != 1 || found[0].UID != uid || found[0].QOSClass != string(v1.PodQOSBurstable) {
		t.Fatalf("discovered %+v, %v; want the one burstable pod %s", found, err, uid)
	}
	s := m.Observe(context.Background(), found)
	cur, inactive := kernelV2(t, pod)
	ps := s.Pods[uid]
	if s.PodCgroups[uid].Path != pod {
		t.Errorf("pod cgroup %q, want %q", s.PodCgroups[uid].Path, pod)
	}
	ws := orMinusOne(ps.MemoryWorkingSet)
	if ws < 48*mib || ws > 48*mib+2*12*mib {
		t.Errorf("pod working set %d MiB, want 48 MiB + runtime (kernel: memory.current %d MiB, inactive_file %d MiB)", ws/mib, cur/mib, inactive/mib)
	}
	if !within(ws, cur-inactive, 0.02) {
		t.Errorf("pod working set %d, kernel memory.current - inactive_file = %d", ws, cur-inactive)
	}
	if orMinusOne(ps.Processes) != 2 {
		t.Errorf("pod processes %v, want 2", deref(ps.Processes))
	}
	if want := readIntFile(t, filepath.Join(v2Mount, pod, "pids.current")); orMinusOne(ps.Tasks) != want {
		t.Errorf("pod tasks %v, want pids.current %d", deref(ps.Tasks), want)
	}
}

// memory.available from the v2 root (no memory.current there: anon + file of
// its memory.stat, as runc and cAdvisor emulate it), allocatableMemory from
// kubepods' memory.max and working set, PSI from /proc/pressure/memory and
// kubepods' memory.pressure, pid.available from /proc.
func TestCgroup2NodeSignalsAgreeWithTheKernel(t *testing.T) {
	requireCgroupV2(t)
	tree := newV2Tree(t)
	kubepods := tree.mkdir("/kubepods", true)
	tree.mkdir("/kubepods/burstable", true)
	const limit = 1 << 30
	if err := os.WriteFile(filepath.Join(kubepods, "memory.max"), []byte(strconv.Itoa(limit)), 0o644); err != nil {
		t.Fatalf("setting the kubepods limit: %v", err)
	}
	uid := types.UID("dddddddd-0000-4000-8000-000000000004")
	pod := "/kubepods/burstable/pod" + string(uid)
	tree.mkdir(pod, true)
	tree.mkdir(pod+"/ctr", false)
	tree.start(pod+"/ctr", 128)
	tree.writeCache(pod+"/ctr", 64)

	m, err := New(v2MonitorConfig(t))
	if err != nil {
		t.Fatal(err)
	}
	rootWS := func() int64 {
		stat := filepath.Join(v2Mount, "memory.stat")
		return statKey(t, stat, "anon") + statKey(t, stat, "file") - statKey(t, stat, "inactive_file")
	}
	for range 3 {
		total := memTotal(t)
		before := total - rootWS()
		s := m.ObserveMemory()
		after := total - rootWS()
		o, ok := s.Observations[policy.SignalMemoryAvailable]
		if !ok {
			t.Fatalf("memory.available missing: %s", s.Missing[policy.SignalMemoryAvailable])
		}
		if o.Available < min(before, after)-2*mib || o.Available > max(before, after)+2*mib || o.Capacity != total {
			t.Errorf("memory.available %d/%d, kernel says %d..%d/%d (MemTotal - (anon + file - inactive_file) of the root)", o.Available, o.Capacity, before, after, total)
		}
		cur, inactive := kernelV2(t, "/kubepods")
		a, ok := s.Observations[policy.SignalAllocatableMemoryAvailable]
		if !ok {
			t.Fatalf("allocatableMemory.available missing: %s", s.Missing[policy.SignalAllocatableMemoryAvailable])
		}
		if a.Capacity != limit || !within(a.Available, limit-(cur-inactive), 0.01) {
			t.Errorf("allocatableMemory.available %d/%d, kernel says %d/%d", a.Available, a.Capacity, limit-(cur-inactive), limit)
		}
		if ws := limit - a.Available; ws < 128*mib || ws > 128*mib+24*mib {
			t.Errorf("kubepods working set %d MiB, want the pod's 128 MiB + runtime, its 64 MiB of page cache excluded (inactive_file %d MiB)", ws/mib, inactive/mib)
		}
	}
	s := m.Observe(context.Background(), nil)
	for _, sig := range []policy.Signal{policy.SignalMemoryPSISomeAvg10, policy.SignalAllocatableMemoryPSISomeAvg10} {
		if _, ok := s.Observations[sig]; !ok {
			t.Errorf("%s missing on cgroup v2: %s", sig, s.Missing[sig])
		}
	}
	if r := readingOf(s, policy.SignalAllocatableMemoryPSISomeAvg10); r.Source != SourceCgroupPSI {
		t.Errorf("%s source %q, want %q", policy.SignalAllocatableMemoryPSISomeAvg10, r.Source, SourceCgroupPSI)
	}
	maxPID := min(readIntFile(t, "/proc/sys/kernel/pid_max"), readIntFile(t, "/proc/sys/kernel/threads-max"))
	raw, _ := os.ReadFile("/proc/loadavg")
	_, total, _ := strings.Cut(strings.Fields(string(raw))[3], "/")
	tasks, _ := strconv.ParseInt(total, 10, 64)
	p := s.Observations[policy.SignalPIDAvailable]
	if p.Capacity != maxPID || !within(p.Available, maxPID-tasks, 0.01) {
		t.Errorf("pid.available %d/%d, /proc says %d/%d", p.Available, p.Capacity, maxPID-tasks, maxPID)
	}
}
