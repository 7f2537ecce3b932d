//go:build integration

package rtboost

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// These tests change this process's scheduling class on the real kernel (run as root, with
// CAP_SYS_NICE, from a cgroup that may hold real-time tasks: make test-brake).

func policies(t *testing.T) map[int]unix.SchedAttr {
	t.Helper()
	b := New(Options{})
	tids, err := b.tasks()
	if err != nil {
		t.Fatal(err)
	}
	out := map[int]unix.SchedAttr{}
	for _, tid := range tids {
		attr, err := unix.SchedGetAttr(tid, 0)
		if errors.Is(err, unix.ESRCH) {
			continue
		}
		if err != nil {
			t.Fatalf("sched_getattr(%d): %v", tid, err)
		}
		out[tid] = *attr
	}
	return out
}

func requireAll(t *testing.T, policy uint32, what string) {
	t.Helper()
	ps := policies(t)
	for tid, a := range ps {
		if a.Policy != policy {
			t.Fatalf("%s: thread %d has policy %d, want %d (all %d threads: %v)", what, tid, a.Policy, policy, len(ps), ps)
		}
		if policy == unix.SCHED_FIFO && a.Flags&unix.SCHED_FLAG_RESET_ON_FORK == 0 {
			t.Fatalf("%s: thread %d is SCHED_FIFO without SCHED_FLAG_RESET_ON_FORK", what, tid)
		}
	}
}

func enabled(t *testing.T, opts Options) *Booster {
	t.Helper()
	b := New(opts)
	if err := b.Enable(true); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Enable(false) })
	return b
}

// The boost raises every thread, sets RLIMIT_RTTIME, forks nothing real-time, ends Hold after
// the last request, and never lasts more than MaxBoost in a row.
func TestBoostIsBounded(t *testing.T) {
	requireAll(t, schedOther, "before any boost")
	b := enabled(t, Options{Hold: 300 * time.Millisecond, MaxBoost: time.Second, Rest: 700 * time.Millisecond})

	var lim unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_RTTIME, &lim); err != nil {
		t.Fatal(err)
	}
	if lim.Cur != uint64(DefaultRTTimeSoft/time.Microsecond) || lim.Max != uint64(DefaultRTTimeHard/time.Microsecond) {
		t.Fatalf("RLIMIT_RTTIME = %d/%d µs, want %d/%d", lim.Cur, lim.Max, DefaultRTTimeSoft/time.Microsecond, DefaultRTTimeHard/time.Microsecond)
	}

	before := policies(t)
	b.Hold()
	if raised, _ := b.Boosted(); !raised {
		t.Fatalf("not boosted after Hold: %v", b.unusable)
	}
	// Every thread there at the raise is SCHED_FIFO with reset-on-fork; one the Go runtime
	// started since (the boost's own goroutines may need one) starts SCHED_OTHER. A thread
	// not in the snapshot before Hold either started after the raise (SCHED_OTHER) or in the
	// moment between the snapshot and the raise (raised, so SCHED_FIFO with reset-on-fork,
	// as CI once saw under load); never SCHED_FIFO without reset-on-fork.
	raisedRight := func(a unix.SchedAttr) bool {
		return a.Policy == unix.SCHED_FIFO && a.Flags&unix.SCHED_FLAG_RESET_ON_FORK != 0
	}
	for tid, a := range policies(t) {
		_, old := before[tid]
		switch {
		case old && !raisedRight(a):
			t.Fatalf("boosted: thread %d has policy %d flags %#x, want SCHED_FIFO with SCHED_FLAG_RESET_ON_FORK", tid, a.Policy, a.Flags)
		case !old && a.Policy != schedOther && !raisedRight(a):
			t.Fatalf("boosted: thread %d, new since the snapshot, has policy %d flags %#x, want SCHED_OTHER (started after the raise) or SCHED_FIFO with reset-on-fork (raised)", tid, a.Policy, a.Flags)
		}
	}

	// A process started while boosted (forked from a real-time thread) is SCHED_OTHER.
	child := exec.Command("sleep", "5")
	if err := child.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = child.Process.Kill(); _ = child.Wait() }()
	if a, err := unix.SchedGetAttr(child.Process.Pid, 0); err != nil || a.Policy != schedOther {
		t.Fatalf("child forked while boosted: %+v, %v; want SCHED_OTHER", a, err)
	}

	// Hold after the last request, it ends.
	time.Sleep(600 * time.Millisecond)
	if raised, _ := b.Boosted(); raised {
		t.Fatal("still boosted 600ms after the last Hold (Hold 300ms)")
	}
	requireAll(t, schedOther, "after the hold")

	// Requests without end: lowered at MaxBoost, then no boost for Rest.
	start := time.Now()
	for time.Since(start) < 1300*time.Millisecond {
		b.Hold()
		time.Sleep(20 * time.Millisecond)
	}
	if raised, _ := b.Boosted(); raised {
		t.Fatal("boosted 1.3s into continuous requests (MaxBoost 1s)")
	}
	requireAll(t, schedOther, "resting after MaxBoost")
	time.Sleep(500 * time.Millisecond) // the rest (700ms from 1s) is over
	b.Hold()
	if raised, _ := b.Boosted(); !raised {
		t.Fatal("not boosted again after the rest")
	}
	if err := b.Enable(false); err != nil {
		t.Fatal(err)
	}
	requireAll(t, schedOther, "disabled")
}

// A goroutine that spins while boosted is caught by the CPU bound within a window or two:
// every thread is lowered and the rest starts.
func TestSpinningIsLowered(t *testing.T) {
	b := enabled(t, Options{Hold: 10 * time.Second, Rest: 10 * time.Second})
	type result struct {
		policy uint32
		took   time.Duration
	}
	done := make(chan result)
	go func() {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		b.Hold() // raises this thread too
		start := time.Now()
		a, _ := unix.SchedGetAttr(0, 0)
		for a.Policy != schedOther && time.Since(start) < 2*time.Second {
			a, _ = unix.SchedGetAttr(0, 0)
		}
		done <- result{a.Policy, time.Since(start)}
	}()
	r := <-done
	if r.policy != schedOther {
		t.Fatalf("the spinning thread's policy after %v is %d, want SCHED_OTHER (the CPU bound: %v of %v)", r.took, r.policy, DefaultMaxCPU, DefaultCPUWindow)
	}
	t.Logf("lowered %v after the spin began", r.took.Round(time.Millisecond))
	if raised, _ := b.Boosted(); raised {
		t.Fatal("still boosted after the CPU bound")
	}
	requireAll(t, schedOther, "after the CPU bound")
	b.Hold()
	if raised, _ := b.Boosted(); raised {
		t.Fatal("boosted again within the rest after the CPU bound")
	}
}

// On cgroup v1 with RT group scheduling, a cgroup gets no real-time time by default and
// SCHED_FIFO is refused inside it; Grant gives it and its ancestors the budget.
func TestGrantOnRTGroupScheduling(t *testing.T) {
	root := "/sys/fs/cgroup/cpu"
	if _, err := os.Stat(filepath.Join(root, "cpu.rt_runtime_us")); err != nil {
		t.Fatalf("this machine's cgroup v1 cpu hierarchy has no RT group scheduling (%v): this test needs CONFIG_RT_GROUP_SCHED, as the project's test machines have", err)
	}
	parent := filepath.Join(root, fmt.Sprintf("evictiond-rtboost-test-%d", os.Getpid()))
	dir := filepath.Join(parent, "pod", "container")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = os.Remove(dir); _ = os.Remove(filepath.Dir(dir)); _ = os.Remove(parent) }()

	errs := make(chan error)
	step := make(chan struct{})
	go func() {
		runtime.LockOSThread() // this thread moves cgroups and changes class; it exits with the goroutine
		tid := strconv.Itoa(unix.Gettid())
		if err := os.WriteFile(filepath.Join(dir, "tasks"), []byte(tid), 0o644); err != nil {
			errs <- err
			return
		}
		fifo := unix.SchedAttr{Size: unix.SizeofSchedAttr, Policy: unix.SCHED_FIFO, Priority: 1}
		errs <- unix.SchedSetAttr(0, &fifo, 0)
		<-step
		errs <- unix.SchedSetAttr(0, &fifo, 0)
		other := unix.SchedAttr{Size: unix.SizeofSchedAttr, Policy: schedOther}
		_ = unix.SchedSetAttr(0, &other, 0)
		errs <- os.WriteFile(filepath.Join(root, "tasks"), []byte(tid), 0o644)
	}()
	if err := <-errs; !errors.Is(err, unix.EPERM) {
		t.Fatalf("SCHED_FIFO in a cgroup without a real-time budget: %v, want EPERM", err)
	}
	wrote, err := Grant(root, dir, 10*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	if len(wrote) != 3 {
		t.Fatalf("Grant wrote %v, want the three levels", wrote)
	}
	for _, d := range []string{parent, filepath.Dir(dir), dir} {
		data, _ := os.ReadFile(filepath.Join(d, "cpu.rt_runtime_us"))
		if strings.TrimSpace(string(data)) != "10000" {
			t.Fatalf("%s/cpu.rt_runtime_us = %q, want 10000", d, data)
		}
	}
	close(step)
	if err := <-errs; err != nil {
		t.Fatalf("SCHED_FIFO after Grant: %v", err)
	}
	if err := <-errs; err != nil {
		t.Fatalf("moving the thread back: %v", err)
	}
	// A second Grant changes nothing.
	if wrote, err := Grant(root, dir, 10*time.Millisecond); err != nil || len(wrote) != 0 {
		t.Fatalf("second Grant: wrote %v, %v", wrote, err)
	}
}

// childEnv starts the test binary as a child that boosts without CAP_SYS_NICE (TestMain).
const childEnv = "RTBOOST_TEST_CHILD"

func TestMain(m *testing.M) {
	if os.Getenv(childEnv) != "" {
		if err := unprivilegedChild(); err != nil {
			fmt.Fprintln(os.Stderr, "child:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// effectiveCaps is this thread's effective capability set.
func effectiveCaps() (uint64, error) {
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if err := unix.Capget(&hdr, &data[0]); err != nil {
		return 0, err
	}
	return uint64(data[0].Effective) | uint64(data[1].Effective)<<32, nil
}

// unprivilegedChild boosts in a process that never held CAP_SYS_NICE nor CAP_SYS_RESOURCE
// (setpriv took them from the bounding set before the exec): RLIMIT_RTPRIO cannot be raised,
// SCHED_FIFO is refused, and the boost must say so and leave every thread in SCHED_OTHER.
func unprivilegedChild() error {
	runtime.LockOSThread()
	caps, err := effectiveCaps()
	if err != nil {
		return err
	}
	if held := caps & (1<<unix.CAP_SYS_NICE | 1<<unix.CAP_SYS_RESOURCE); held != 0 {
		return fmt.Errorf("effective capabilities %#x still hold CAP_SYS_NICE or CAP_SYS_RESOURCE: setpriv did not drop them", caps)
	}
	var logged strings.Builder
	b := New(Options{Hold: 10 * time.Second, Logger: slog.New(slog.NewTextHandler(&logged, nil))})
	if err := b.Enable(true); err != nil {
		return fmt.Errorf("Enable without the privilege: %w, want the refusal at the first boost only", err)
	}
	sentinel := b.Sentinel() // this thread (locked above): refused with the boost
	defer sentinel()
	b.Hold()
	raised, _ := b.Boosted()
	if raised || b.unusable == nil || b.rtprioErr == nil {
		return fmt.Errorf("boosted %v, refusal %v, RLIMIT_RTPRIO error %v: want refused on both counts", raised, b.unusable, b.rtprioErr)
	}
	if !strings.Contains(logged.String(), "realtime boost unavailable") || !strings.Contains(logged.String(), "rlimitRTPRIO") {
		return fmt.Errorf("log %q: want the refusal logged with why RLIMIT_RTPRIO was not set", logged.String())
	}
	b.Hold() // refused once: not tried again
	if n := strings.Count(logged.String(), "realtime boost unavailable"); n != 1 {
		return fmt.Errorf("the refusal was logged %d times, want once", n)
	}
	tids, err := b.tasks()
	if err != nil {
		return err
	}
	for _, tid := range tids {
		a, err := unix.SchedGetAttr(tid, 0)
		if errors.Is(err, unix.ESRCH) {
			continue
		}
		if err != nil || a.Policy != schedOther {
			return fmt.Errorf("thread %d %+v, %v; want SCHED_OTHER", tid, a, err)
		}
	}
	return b.Enable(false)
}

// A node where SCHED_FIFO is refused (neither CAP_SYS_NICE nor CAP_SYS_RESOURCE to set
// RLIMIT_RTPRIO, which the chart's capabilities allow): Enable succeeds, the first boost is
// refused and logged once with its reasons, and every thread stays in SCHED_OTHER. (The boost
// under the chart's capabilities, without CAP_SYS_NICE, is proven in the cgroup v2 node tier,
// RealtimeBoost: this machine's test environment has no CAP_SYS_RESOURCE to give a child.)
func TestBoostRefusedWithoutThePrivilege(t *testing.T) {
	setpriv, err := exec.LookPath("setpriv")
	if err != nil {
		t.Fatalf("setpriv (util-linux) is needed to start a child without CAP_SYS_NICE: %v", err)
	}
	const drop = "-sys_nice,-sys_resource"
	cmd := exec.Command(setpriv, "--bounding-set="+drop, "--inh-caps="+drop, os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), childEnv+"=1")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
}

// The sentinel (the thread that waits on the kernel's notifications) is SCHED_FIFO as soon as it
// registers and between boosts, while every other thread goes back to SCHED_OTHER after a boost;
// it rests with the others when a boost reaches a bound and is raised again after the rest; it
// is lowered when the boost is turned off and raised when it is turned on again; released, it is
// SCHED_OTHER. A sentinel in an unprivileged process is refused with the boost
// (unprivilegedChild).
func TestSentinelStaysRealtimeBetweenBoosts(t *testing.T) {
	requireAll(t, schedOther, "before any boost")
	const hold, maxBoost, rest = 200 * time.Millisecond, 500 * time.Millisecond, 700 * time.Millisecond
	b := enabled(t, Options{Hold: hold, MaxBoost: maxBoost, Rest: rest})

	tidc, releasec, released := make(chan int), make(chan struct{}), make(chan struct{})
	go func() {
		runtime.LockOSThread() // never unlocked: the thread exits with the goroutine
		release := b.Sentinel()
		tidc <- unix.Gettid()
		<-releasec
		release()
		close(released)
	}()
	tid := <-tidc
	policyOf := func() uint32 {
		t.Helper()
		a, err := unix.SchedGetAttr(tid, 0)
		if err != nil {
			t.Fatalf("sched_getattr(%d): %v", tid, err)
		}
		if a.Policy == unix.SCHED_FIFO && a.Flags&unix.SCHED_FLAG_RESET_ON_FORK == 0 {
			t.Fatalf("sentinel %d is SCHED_FIFO without SCHED_FLAG_RESET_ON_FORK", tid)
		}
		return a.Policy
	}
	othersAre := func(policy uint32, what string) {
		t.Helper()
		for other, a := range policies(t) {
			if other != tid && a.Policy != policy {
				t.Fatalf("%s: thread %d has policy %d, want %d", what, other, a.Policy, policy)
			}
		}
	}
	waitFor := func(what string, cond func() bool) {
		t.Helper()
		for deadline := time.Now().Add(5 * time.Second); !cond(); time.Sleep(10 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("after 5s: %s", what)
			}
		}
	}

	if p := policyOf(); p != unix.SCHED_FIFO {
		t.Fatalf("sentinel registered with the boost enabled: policy %d, want SCHED_FIFO", p)
	}
	othersAre(schedOther, "no boost yet")

	// A boost and its end: the others back in SCHED_OTHER, the sentinel still SCHED_FIFO.
	b.Hold()
	if raised, _ := b.Boosted(); !raised {
		t.Fatalf("not boosted after Hold: %v", b.unusable)
	}
	waitFor("the boost ends Hold after the last request", func() bool { raised, _ := b.Boosted(); return !raised })
	if p := policyOf(); p != unix.SCHED_FIFO {
		t.Fatalf("sentinel after a boost: policy %d, want SCHED_FIFO", p)
	}
	othersAre(schedOther, "after the boost")

	// A boost held past MaxBoost rests: the sentinel too, then it is raised again.
	start := time.Now()
	for time.Since(start) < maxBoost+2*hold {
		b.Hold()
		time.Sleep(20 * time.Millisecond)
	}
	if raised, _ := b.Boosted(); raised {
		t.Fatalf("still boosted %v after the first Hold (MaxBoost %v)", time.Since(start), maxBoost)
	}
	if p := policyOf(); p != schedOther && time.Now().Before(b.restUntil) {
		t.Fatalf("sentinel while resting: policy %d, want SCHED_OTHER", p)
	}
	waitFor("the sentinel is SCHED_FIFO again after the rest", func() bool { return policyOf() == unix.SCHED_FIFO })
	if time.Now().Before(b.restUntil) {
		t.Fatalf("sentinel raised %v before the rest ended", time.Until(b.restUntil))
	}

	// Off and on again (a configuration reload).
	if err := b.Enable(false); err != nil {
		t.Fatal(err)
	}
	if p := policyOf(); p != schedOther {
		t.Fatalf("sentinel with the boost off: policy %d, want SCHED_OTHER", p)
	}
	if err := b.Enable(true); err != nil {
		t.Fatal(err)
	}
	if p := policyOf(); p != unix.SCHED_FIFO {
		t.Fatalf("sentinel with the boost on again: policy %d, want SCHED_FIFO", p)
	}

	close(releasec)
	<-released
	if a, err := unix.SchedGetAttr(tid, 0); err == nil && a.Policy != schedOther {
		t.Fatalf("released sentinel: policy %d, want SCHED_OTHER (or its thread gone)", a.Policy)
	}
	othersAre(schedOther, "after the release")
}
