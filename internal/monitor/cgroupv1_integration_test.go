//go:build integration

package monitor

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/evictiond/evictiond/internal/policy"
)

// These tests run on this machine's real cgroup v1 hierarchy (as root): they
// build a kubepods tree under a private cgroup root, put processes that
// allocate known amounts into pod cgroups, and compare what the monitor reads
// with the kernel's own files read at the same moment.

const childModeEnv = "EVICTIOND_MONITOR_TEST_CHILD_MIB"

// TestMain doubles as the allocating child: with childModeEnv set, the test
// binary waits for a line on stdin (time to be moved into its cgroup),
// allocates and touches that many MiB, says "ready", and holds them until
// stdin closes.
func TestMain(m *testing.M) {
	if v := os.Getenv(childModeEnv); v != "" {
		os.Exit(runAllocatingChild(v))
	}
	os.Exit(m.Run())
}

var sink [][]byte

func runAllocatingChild(mib string) int {
	n, err := strconv.Atoi(mib)
	if err != nil {
		fmt.Fprintln(os.Stderr, "bad MiB:", mib)
		return 2
	}
	in := bufio.NewReader(os.Stdin)
	if _, err := in.ReadString('\n'); err != nil {
		return 3
	}
	for i := 0; i < n; i++ {
		b := make([]byte, 1<<20)
		for j := 0; j < len(b); j += 4096 {
			b[j] = 1
		}
		sink = append(sink, b)
	}
	fmt.Println("ready")
	_, _ = io.Copy(io.Discard, in)
	return 0
}

const v1CgroupMount = "/sys/fs/cgroup"

// testControllers are the v1 controllers a test pod cgroup is made in: the
// monitor reads memory and pids; cAdvisor, with only filesystem metrics on,
// watches the devices hierarchy (the kubelet makes pod cgroups in all).
var testControllers = []string{"memory", "pids", "devices"}

// testCgroupTree is a kubepods hierarchy under a private cgroup root in the
// memory and pids controllers, removed when the test ends.
type testCgroupTree struct {
	t      testing.TB
	root   string // e.g. /evictiond-test-pods-1234
	procs  []*exec.Cmd
	stdins []io.WriteCloser
}

func requireCgroupV1(t testing.TB) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Fatal("this test creates cgroups and must run as root (make test-monitor runs it with sudo when needed)")
	}
	for _, ctl := range testControllers {
		if _, err := os.Stat(filepath.Join(v1CgroupMount, ctl, "cgroup.procs")); err != nil {
			t.Fatalf("the cgroup v1 %s controller is not mounted at %s: %v (this tier needs a cgroup v1 host; cgroup v2 is covered by the fixture tests)", ctl, filepath.Join(v1CgroupMount, ctl), err)
		}
	}
}

func newTestCgroupTree(t testing.TB, name string) *testCgroupTree {
	tree := &testCgroupTree{t: t, root: fmt.Sprintf("/evictiond-test-%s-%d", name, os.Getpid())}
	t.Cleanup(tree.remove)
	for _, p := range []string{"", "/kubepods", "/kubepods/burstable", "/kubepods/besteffort"} {
		tree.mkdir(t, tree.root+p)
	}
	return tree
}

func (tr *testCgroupTree) mkdir(t testing.TB, cg string) {
	t.Helper()
	for _, ctl := range testControllers {
		dir := filepath.Join(v1CgroupMount, ctl, cg)
		if err := os.Mkdir(dir, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
			t.Fatalf("creating cgroup %s: %v", dir, err)
		}
	}
}

func (tr *testCgroupTree) podCgroup(t testing.TB, qos string, uid types.UID) string {
	t.Helper()
	cg := tr.root + "/kubepods"
	switch v1.PodQOSClass(qos) {
	case v1.PodQOSBurstable:
		cg += "/burstable"
	case v1.PodQOSBestEffort:
		cg += "/besteffort"
	}
	cg += "/pod" + string(uid)
	tr.mkdir(t, cg)
	return cg
}

// start runs a process in cgroup cg that holds mib MiB of touched anonymous
// memory (mib 0: a process that only waits).
func (tr *testCgroupTree) start(t testing.TB, cg string, mib int) {
	t.Helper()
	var procs []string
	for _, ctl := range testControllers {
		procs = append(procs, filepath.Join(v1CgroupMount, ctl, cg, "cgroup.procs"))
	}
	cmd, stdin := startChild(t, mib, procs...)
	tr.procs = append(tr.procs, cmd)
	tr.stdins = append(tr.stdins, stdin)
}

// startChild runs this binary as an allocating child (TestMain), moves it
// into each cgroup.procs file given, lets it allocate mib MiB and waits for
// it to say so. Closing the returned stdin ends it.
func startChild(t testing.TB, mib int, procs ...string) (*exec.Cmd, io.WriteCloser) {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(self)
	cmd.Env = append(os.Environ(), fmt.Sprintf("%s=%d", childModeEnv, mib))
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting child: %v", err)
	}
	for _, p := range procs {
		if err := os.WriteFile(p, []byte(strconv.Itoa(cmd.Process.Pid)), 0o644); err != nil {
			_ = cmd.Process.Kill()
			_, _ = cmd.Process.Wait()
			t.Fatalf("moving pid %d into %s: %v", cmd.Process.Pid, p, err)
		}
	}
	if _, err := io.WriteString(stdin, "go\n"); err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil || strings.TrimSpace(line) != "ready" {
		t.Fatalf("child moved to %v did not get ready: %q %v", procs, line, err)
	}
	// The stdin pipe stays open: closing it ends the child.
	return cmd, stdin
}

func (tr *testCgroupTree) remove() {
	stopChildren(tr.procs, tr.stdins)
	// Every controller: a runtime (runc) creates pod and container cgroups in
	// all of them, not only the ones this test made.
	roots, _ := filepath.Glob(filepath.Join(v1CgroupMount, "*", tr.root))
	removeCgroupDirs(tr.t, roots)
}

func stopChildren(procs []*exec.Cmd, stdins []io.WriteCloser) {
	for _, in := range stdins {
		_ = in.Close()
	}
	for _, cmd := range procs {
		_ = cmd.Process.Signal(syscall.SIGKILL)
		_, _ = cmd.Process.Wait()
	}
}

// removeCgroupDirs removes the cgroups under (and including) each root,
// deepest first; a memcg may be busy for a moment after its last task exits.
func removeCgroupDirs(t testing.TB, roots []string) {
	var dirs []string
	for _, root := range roots {
		_ = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
			if err == nil && d.IsDir() {
				dirs = append(dirs, p)
			}
			return nil
		})
	}
	sort.Slice(dirs, func(i, j int) bool { return len(dirs[i]) > len(dirs[j]) })
	for _, dir := range dirs {
		var err error
		for i := 0; i < 50; i++ {
			if err = os.Remove(dir); err == nil || errors.Is(err, os.ErrNotExist) {
				err = nil
				break
			}
			time.Sleep(20 * time.Millisecond)
		}
		if err != nil {
			t.Errorf("removing test cgroup %s: %v", dir, err)
		}
	}
}

func (tr *testCgroupTree) monitorConfig(t testing.TB) Config {
	return Config{
		CgroupRoot:           tr.root,
		CgroupDriver:         CgroupDriverCgroupfs,
		KubeletRootDir:       t.TempDir(),
		PodLogsDir:           t.TempDir(),
		ImageFsDir:           t.TempDir(),
		DisableCAdvisor:      true,
		HousekeepingInterval: time.Second,
	}
}

// kernelWorkingSet reads a memcg's usage - total_inactive_file directly.
func kernelWorkingSet(t testing.TB, cg string) int64 {
	t.Helper()
	dir := filepath.Join(v1CgroupMount, "memory", cg)
	usage := readIntFile(t, filepath.Join(dir, "memory.usage_in_bytes"))
	raw, err := os.ReadFile(filepath.Join(dir, "memory.stat"))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(raw), "\n") {
		if v, ok := strings.CutPrefix(line, "total_inactive_file "); ok {
			inactive, _ := strconv.ParseInt(v, 10, 64)
			return max(0, usage-inactive)
		}
	}
	t.Fatalf("no total_inactive_file in %s/memory.stat", dir)
	return 0
}

func readIntFile(t testing.TB, path string) int64 {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	v, err := strconv.ParseInt(strings.TrimSpace(string(raw)), 10, 64)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return v
}

func memTotal(t testing.TB) int64 {
	raw, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(raw), "\n") {
		if v, ok := strings.CutPrefix(line, "MemTotal:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			return kb * 1024
		}
	}
	t.Fatal("no MemTotal")
	return 0
}

func within(got, want int64, fraction float64) bool {
	return math.Abs(float64(got-want)) <= fraction*math.Abs(float64(want))
}

const mib = 1 << 20

func TestCgroupV1PodsWorkingSetAndProcessCounts(t *testing.T) {
	requireCgroupV1(t)
	tree := newTestCgroupTree(t, "pods")
	podA := types.UID("aaaaaaaa-0000-4000-8000-000000000001")
	podB := types.UID("bbbbbbbb-0000-4000-8000-000000000002")
	podC := types.UID("cccccccc-0000-4000-8000-000000000003")
	cgA := tree.podCgroup(t, string(v1.PodQOSBurstable), podA)
	cgB := tree.podCgroup(t, string(v1.PodQOSGuaranteed), podB)
	cgC := tree.podCgroup(t, string(v1.PodQOSBestEffort), podC)
	// Pod A: two processes in a container cgroup, one in the pod cgroup itself.
	tree.mkdir(t, cgA+"/ctr1")
	tree.start(t, cgA+"/ctr1", 64)
	tree.start(t, cgA+"/ctr1", 32)
	tree.start(t, cgA, 0)
	tree.start(t, cgB, 160)
	tree.start(t, cgC, 0)

	m, err := New(tree.monitorConfig(t))
	if err != nil {
		t.Fatal(err)
	}
	s := m.Observe(context.Background(), []PodRef{
		{UID: podA, QOSClass: string(v1.PodQOSBurstable)},
		{UID: podB, QOSClass: string(v1.PodQOSGuaranteed)},
		{UID: podC}, // QoS unknown: found by trying each tier
	})
	// Each Go child holds its allocation plus a few MiB of runtime.
	const runtimeSlack = 12 * mib
	for _, tc := range []struct {
		uid       types.UID
		allocated int64
		processes int64
	}{{podA, 96 * mib, 3}, {podB, 160 * mib, 1}, {podC, 0, 1}} {
		ps := s.Pods[tc.uid]
		if ps.MemoryWorkingSet == nil {
			t.Errorf("pod %s: no working set (%s)", tc.uid, s.PodErrors[tc.uid])
			continue
		}
		ws := *ps.MemoryWorkingSet
		t.Logf("pod %s: working set %.1f MiB (allocated %d MiB), %d processes", tc.uid, float64(ws)/mib, tc.allocated/mib, deref(ps.Processes))
		if ws < tc.allocated || ws > tc.allocated+tc.processes*runtimeSlack {
			t.Errorf("pod %s working set %d MiB, want %d MiB allocated + at most %d MiB runtime", tc.uid, ws/mib, tc.allocated/mib, tc.processes*runtimeSlack/mib)
		}
		if ps.Processes == nil || *ps.Processes != tc.processes {
			t.Errorf("pod %s processes %v, want %d", tc.uid, deref(ps.Processes), tc.processes)
		}
		// Tasks count threads (pids.current): every Go child runs several.
		if ps.Tasks == nil || ps.Processes == nil || *ps.Tasks <= *ps.Processes {
			t.Errorf("pod %s tasks %v, want more than its %v processes (threads included)", tc.uid, deref(ps.Tasks), deref(ps.Processes))
		}
	}
	if got := s.PodCgroups[podC].Path; got != cgC {
		t.Errorf("pod with unknown QoS found at %q, want %q", got, cgC)
	}
	// The difference between two pods is the difference of their allocations.
	diff := *s.Pods[podB].MemoryWorkingSet - *s.Pods[podA].MemoryWorkingSet
	if diff < 64*mib-2*runtimeSlack || diff > 64*mib+runtimeSlack {
		t.Errorf("pod B - pod A working set = %d MiB, want about 64 MiB", diff/mib)
	}
}

func TestCgroupV1MemoryAvailableAgreesWithTheKernel(t *testing.T) {
	requireCgroupV1(t)
	tree := newTestCgroupTree(t, "mem")
	kubepods := tree.root + "/kubepods"
	setLimit := func(limit int64) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(v1CgroupMount, "memory", kubepods, "memory.limit_in_bytes"), []byte(strconv.FormatInt(limit, 10)), 0o644); err != nil {
			t.Fatalf("setting the kubepods limit: %v", err)
		}
	}
	setLimit(1 << 30)
	uid := types.UID("dddddddd-0000-4000-8000-000000000004")
	podCgroup := tree.podCgroup(t, string(v1.PodQOSBurstable), uid)
	tree.start(t, podCgroup, 128)

	m, err := New(tree.monitorConfig(t))
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 5; i++ {
		// A limit of its own at each read: the kubepods files are kept open
		// after the first, and must read what the kernel says now.
		limit := int64(1<<30 + i*64<<20)
		setLimit(limit)
		total := memTotal(t)
		before := total - kernelWorkingSet(t, "/")
		s := m.ObserveMemory()
		after := memTotal(t) - kernelWorkingSet(t, "/")
		o, ok := s.Observations[policy.SignalMemoryAvailable]
		if !ok {
			t.Fatalf("memory.available missing: %s", s.Missing[policy.SignalMemoryAvailable])
		}
		ref := (before + after) / 2
		if !within(o.Available, ref, 0.01) {
			t.Errorf("memory.available %d, kernel says %d..%d (MemTotal - (usage - total_inactive_file))", o.Available, before, after)
		}
		if o.Capacity != total {
			t.Errorf("memory.available capacity %d, want MemTotal %d", o.Capacity, total)
		}
		a, ok := s.Observations[policy.SignalAllocatableMemoryAvailable]
		if !ok {
			t.Fatalf("allocatableMemory.available missing: %s", s.Missing[policy.SignalAllocatableMemoryAvailable])
		}
		kernelAlloc := limit - kernelWorkingSet(t, kubepods)
		if a.Capacity != limit || !within(a.Available, kernelAlloc, 0.01) {
			t.Errorf("allocatableMemory.available %d/%d, kernel says %d/%d", a.Available, a.Capacity, kernelAlloc, limit)
		}
		if limit-a.Available < 128*mib {
			t.Errorf("kubepods working set %d MiB, want at least the pod's 128 MiB", (limit-a.Available)/mib)
		}
		if time.Since(o.Time) > time.Second {
			t.Errorf("memory.available read %s ago", time.Since(o.Time))
		}
	}
	// Kept open: the node's files, not the pods'.
	s := m.Observe(context.Background(), []PodRef{{UID: uid, QOSClass: string(v1.PodQOSBurstable)}})
	if s.Pods[uid].MemoryWorkingSet == nil {
		t.Fatalf("pod %s not read: %s", uid, s.PodErrors[uid])
	}
	kept := m.files.Kept()
	t.Logf("kept open: %s", strings.Join(kept, " "))
	for _, want := range []string{"/proc/meminfo", filepath.Join(v1CgroupMount, "memory", kubepods, "memory.stat"),
		filepath.Join(v1CgroupMount, "memory", kubepods, "memory.limit_in_bytes"), filepath.Join(v1CgroupMount, "memory", "memory.stat")} {
		if !slices.Contains(kept, want) {
			t.Errorf("%s is not kept open", want)
		}
	}
	for _, p := range kept {
		if strings.Contains(p, podCgroup) {
			t.Errorf("the pod's %s is kept open", p)
		}
	}
	if err := m.Stop(); err != nil {
		t.Fatal(err)
	}
	if kept := m.files.Kept(); len(kept) != 0 {
		t.Errorf("still kept open after Stop: %v", kept)
	}
	// The memAvailable formula reports MemAvailable.
	cfg := tree.monitorConfig(t)
	cfg.MemoryFormula = MemoryFormulaMemAvailable
	m2, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	o := m2.ObserveMemory().Observations[policy.SignalMemoryAvailable]
	if o.Available <= 0 || o.Available > o.Capacity {
		t.Errorf("memAvailable %d of %d", o.Available, o.Capacity)
	}
}

func TestCgroupV1PIDAndNodefsAgreeWithProcAndStatfs(t *testing.T) {
	requireCgroupV1(t)
	tree := newTestCgroupTree(t, "pid")
	cfg := tree.monitorConfig(t)
	m, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	s := m.Observe(context.Background(), nil)

	maxPID := min(readIntFile(t, "/proc/sys/kernel/pid_max"), readIntFile(t, "/proc/sys/kernel/threads-max"))
	raw, _ := os.ReadFile("/proc/loadavg")
	_, total, _ := strings.Cut(strings.Fields(string(raw))[3], "/")
	tasks, _ := strconv.ParseInt(total, 10, 64)
	p := s.Observations[policy.SignalPIDAvailable]
	if p.Capacity != maxPID || !within(p.Available, maxPID-tasks, 0.01) {
		t.Errorf("pid.available %d/%d, /proc says %d/%d", p.Available, p.Capacity, maxPID-tasks, maxPID)
	}

	var st unix.Statfs_t
	if err := unix.Statfs(cfg.KubeletRootDir, &st); err != nil {
		t.Fatal(err)
	}
	n := s.Observations[policy.SignalNodeFsAvailable]
	if n.Capacity != int64(st.Blocks)*st.Frsize || !within(n.Available, int64(st.Bavail)*st.Frsize, 0.01) {
		t.Errorf("nodefs.available %d/%d, statfs says %d/%d", n.Available, n.Capacity, int64(st.Bavail)*st.Frsize, int64(st.Blocks)*st.Frsize)
	}
	i := s.Observations[policy.SignalNodeFsInodesFree]
	if i.Capacity != int64(st.Files) || !within(i.Available, int64(st.Ffree), 0.01) {
		t.Errorf("nodefs.inodesFree %d/%d, statfs says %d/%d", i.Available, i.Capacity, st.Ffree, st.Files)
	}
	// PSI from the real /proc/pressure/memory.
	if _, ok := s.Observations[policy.SignalMemoryPSISomeAvg10]; !ok {
		t.Errorf("memory PSI missing: %s", s.Missing[policy.SignalMemoryPSISomeAvg10])
	}
}

func TestCAdvisorWatchesPodCgroupsAndReadsImagefs(t *testing.T) {
	requireCgroupV1(t)
	tree := newTestCgroupTree(t, "cadv")
	uid := types.UID("eeeeeeee-0000-4000-8000-000000000005")
	cg := tree.podCgroup(t, string(v1.PodQOSBurstable), uid)
	cfg := tree.monitorConfig(t)
	cfg.DisableCAdvisor = false
	cfg.CAdvisorWatchPods = true
	m, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if err := m.Start(ctx); err != nil {
		t.Fatalf("starting the monitor with cAdvisor: %v", err)
	}
	defer func() {
		if err := m.Stop(); err != nil {
			t.Error(err)
		}
	}()
	deadline := time.Now().Add(10 * time.Second)
	for {
		names, err := m.cadvisor.watchedContainers(tree.root + "/kubepods")
		if err == nil && contains(names, cg) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("cAdvisor does not watch %s after 10s: %v %v", cg, names, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
	s := m.Observe(ctx, []PodRef{{UID: uid, QOSClass: string(v1.PodQOSBurstable)}})
	r := readingOf(s, policy.SignalImageFsAvailable)
	if r.Source != SourceCAdvisor {
		t.Fatalf("imagefs source %q (missing: %s), want %q", r.Source, s.Missing[policy.SignalImageFsAvailable], SourceCAdvisor)
	}
	var st unix.Statfs_t
	if err := unix.Statfs(cfg.ImageFsDir, &st); err != nil {
		t.Fatal(err)
	}
	if r.Capacity != int64(st.Blocks)*st.Frsize {
		t.Errorf("cAdvisor imagefs capacity %d, statfs says %d", r.Capacity, int64(st.Blocks)*st.Frsize)
	}
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}

// TestCgroupV1SystemdDriverLayout lays pods out as the kubelet's systemd
// driver names them (slices, escaped UIDs, cri-containerd scopes) on this
// machine's real cgroup v1 hierarchy, under a private cgroup root slice.
func TestCgroupV1SystemdDriverLayout(t *testing.T) {
	requireCgroupV1(t)
	tree := &testCgroupTree{t: t, root: fmt.Sprintf("/evictiondtest%d.slice", os.Getpid())}
	t.Cleanup(tree.remove)
	prefix := strings.TrimSuffix(strings.TrimPrefix(tree.root, "/"), ".slice")
	kubepods := tree.root + "/" + prefix + "-kubepods.slice"
	burstable := kubepods + "/" + prefix + "-kubepods-burstable.slice"
	uid := types.UID("abcdef01-2345-4678-9abc-def012345678")
	pod := burstable + "/" + prefix + "-kubepods-burstable-podabcdef01_2345_4678_9abc_def012345678.slice"
	ctr := pod + "/cri-containerd-" + strings.Repeat("ab", 32) + ".scope"
	for _, cg := range []string{tree.root, kubepods, burstable, pod, ctr} {
		tree.mkdir(t, cg)
	}
	tree.start(t, ctr, 48)
	tree.start(t, ctr, 0)

	cfg := tree.monitorConfig(t)
	cfg.CgroupDriver = CgroupDriverSystemd
	cfg.CgroupRoot = tree.root
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
	ps := s.Pods[uid]
	if s.PodCgroups[uid].Path != pod {
		t.Errorf("pod cgroup %q, want %q", s.PodCgroups[uid].Path, pod)
	}
	if ws := orMinusOne(ps.MemoryWorkingSet); ws < 48*mib || ws > 48*mib+2*12*mib {
		t.Errorf("pod working set %d MiB, want 48 MiB + runtime", ws/mib)
	}
	if orMinusOne(ps.Processes) != 2 {
		t.Errorf("pod processes %v, want 2", deref(ps.Processes))
	}
}
