//go:build integration

package brake

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// The integration tests run on a real kernel's cgroups (as root): the v1
// freezer and memory controllers of this machine (cgroupv1_integration_test.go,
// make test-brake) and the unified hierarchy of the cgroup v2 VM
// (cgroup2_integration_test.go, make test-cgroup2). Each builds a pod cgroup
// with a container cgroup below it, puts real processes in it (one that
// keeps allocating memory, one that keeps forking) and proves that a frozen
// pod's memory and process count stay flat, that a thaw lets it go on, and
// that a kill leaves no task behind.

const childEnv = "EVICTIOND_BRAKE_TEST_CHILD"

// TestMain doubles as the test's workloads: "alloc" touches 1 MiB every
// millisecond up to 512 MiB and holds it; "fork" starts a sleeping child
// every 5 ms up to 100. Each waits for a line on stdin first (time to be
// moved into its cgroup).
func TestMain(m *testing.M) {
	switch os.Getenv(childEnv) {
	case "":
		os.Exit(m.Run())
	case "alloc":
		waitGo()
		var sink [][]byte
		for len(sink) < 512 {
			b := make([]byte, 1<<20)
			for j := 0; j < len(b); j += 4096 {
				b[j] = 1
			}
			sink = append(sink, b)
			time.Sleep(time.Millisecond)
		}
		for {
			time.Sleep(time.Hour)
		}
	case "fork":
		waitGo()
		for range 100 {
			cmd := exec.Command("/bin/sleep", "3600")
			if err := cmd.Start(); err != nil {
				fmt.Fprintln(os.Stderr, "fork:", err)
				os.Exit(3)
			}
			go func() { _ = cmd.Wait() }()
			time.Sleep(5 * time.Millisecond)
		}
		for {
			time.Sleep(time.Hour)
		}
	default:
		os.Exit(2)
	}
}

func waitGo() {
	if _, err := bufio.NewReader(os.Stdin).ReadString('\n'); err != nil {
		os.Exit(4)
	}
}

// testPod is a pod cgroup with one container cgroup, in one or more
// hierarchies.
type testPod struct {
	pod PodCgroup
	// procs are the container cgroups' cgroup.procs files a workload joins.
	procs []string
	// memory is the pod's usage file (memory.usage_in_bytes, memory.current).
	memory string
	// leafTasks lists the files that must be empty once the pod is killed.
	leafTasks []string
	// checkFrozen, if set, checks the kernel's own view of a frozen pod.
	checkFrozen func(t *testing.T)
}

// removeCgroup removes a cgroup directory, retrying while its last tasks exit.
func removeCgroup(dir string) error {
	var err error
	for range 200 {
		err = os.Remove(dir)
		if err == nil || errors.Is(err, os.ErrNotExist) {
			return nil
		}
		time.Sleep(10 * time.Millisecond)
	}
	return err
}

// start runs a workload in the container cgroup; it is reaped as soon as it
// exits, and how it ended is sent on the channel.
func (p *testPod) start(t *testing.T, mode string) (*exec.Cmd, <-chan error) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), childEnv+"="+mode)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	reaped := make(chan struct{})
	go func() { done <- cmd.Wait(); close(reaped) }()
	t.Cleanup(func() {
		_ = p.pod.Thaw()
		_ = cmd.Process.Kill()
		<-reaped
	})
	for _, f := range p.procs {
		if err := os.WriteFile(f, []byte(strconv.Itoa(cmd.Process.Pid)), 0o644); err != nil {
			t.Fatalf("moving %d into %s: %v", cmd.Process.Pid, f, err)
		}
	}
	if _, err := io.WriteString(stdin, "go\n"); err != nil {
		t.Fatal(err)
	}
	return cmd, done
}

func (p *testPod) memoryUsage(t *testing.T) int64 {
	t.Helper()
	b, err := os.ReadFile(p.memory)
	if err != nil {
		t.Fatal(err)
	}
	v, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// waitFor polls cond every 5 ms up to timeout.
func waitFor(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", timeout, what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func testFrozenPodMemoryStaysFlatThawedItGrows(t *testing.T, p *testPod) {
	_, _ = p.start(t, "alloc")
	waitFor(t, 10*time.Second, "the allocator to pass 32 MiB", func() bool { return p.memoryUsage(t) > 32<<20 })

	if err := p.pod.Freeze(); err != nil {
		t.Fatal(err)
	}
	if frozen, err := p.pod.Frozen(); err != nil || !frozen {
		t.Fatalf("Frozen() = %v, %v after Freeze", frozen, err)
	}
	if p.checkFrozen != nil {
		p.checkFrozen(t)
	}
	atFreeze := p.memoryUsage(t)
	time.Sleep(300 * time.Millisecond)
	if later := p.memoryUsage(t); later > atFreeze+1<<20 {
		t.Errorf("frozen pod grew from %d to %d MiB in 300ms", atFreeze>>20, later>>20)
	}

	if err := p.pod.Thaw(); err != nil {
		t.Fatal(err)
	}
	if frozen, err := p.pod.Frozen(); err != nil || frozen {
		t.Fatalf("Frozen() = %v, %v after Thaw", frozen, err)
	}
	waitFor(t, 5*time.Second, "the thawed allocator to grow 16 MiB", func() bool { return p.memoryUsage(t) > atFreeze+16<<20 })
}

func testKillEndsEveryTaskOfAFrozenPod(t *testing.T, p *testPod) {
	_, allocDone := p.start(t, "alloc")
	_, forkerDone := p.start(t, "fork")
	waitFor(t, 10*time.Second, "the forker to start 20 children", func() bool {
		pids, err := p.pod.Pids()
		return err == nil && len(pids) >= 22
	})
	if err := p.pod.Freeze(); err != nil {
		t.Fatal(err)
	}
	frozenPids, err := p.pod.Pids()
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(200 * time.Millisecond)
	if later, _ := p.pod.Pids(); len(later) != len(frozenPids) {
		t.Errorf("frozen pod's processes went from %d to %d: the forker still forks", len(frozenPids), len(later))
	}

	start := time.Now()
	n, err := p.pod.Kill(5 * time.Second)
	if err != nil {
		t.Fatal(err)
	}
	took := time.Since(start)
	if n != len(frozenPids) {
		t.Errorf("Kill ended %d processes, want the %d of the frozen pod", n, len(frozenPids))
	}
	for name, done := range map[string]<-chan error{"allocator": allocDone, "forker": forkerDone} {
		select {
		case err := <-done:
			var exit *exec.ExitError
			if !errors.As(err, &exit) || exit.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
				t.Errorf("%s ended with %v, want SIGKILL", name, err)
			}
		case <-time.After(5 * time.Second):
			t.Errorf("%s still running 5s after Kill", name)
		}
	}
	for _, f := range p.leafTasks {
		tasks, err := os.ReadFile(f)
		if err != nil || len(strings.TrimSpace(string(tasks))) != 0 {
			t.Errorf("%s still lists %q (%v)", f, tasks, err)
		}
	}
	if frozen, err := p.pod.Frozen(); err != nil || frozen {
		t.Errorf("after Kill the pod cgroup is frozen=%v (%v), want thawed", frozen, err)
	}
	t.Logf("killed %d processes (an allocator, a forker and its children) in %v", n, took)
}

func testHoldThawsAtItsDeadline(t *testing.T, p *testPod) {
	_, _ = p.start(t, "alloc")
	waitFor(t, 10*time.Second, "the allocator to pass 16 MiB", func() bool { return p.memoryUsage(t) > 16<<20 })
	expired := make(chan Hold, 1)
	b := New(func(h Hold, err error) {
		if err != nil {
			t.Errorf("thaw at the deadline: %v", err)
		}
		expired <- h
	})
	h, err := b.Freeze("uid-1", "default/alloc", p.pod, 300*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("froze in %v", h.FreezeTook)
	select {
	case got := <-expired:
		if got.UID != "uid-1" {
			t.Errorf("expired hold %+v", got)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the hold did not end at its 300ms deadline")
	}
	if frozen, err := p.pod.Frozen(); err != nil || frozen {
		t.Errorf("after the deadline the pod is frozen=%v (%v)", frozen, err)
	}
	if len(b.Held()) != 0 {
		t.Errorf("holds left: %+v", b.Held())
	}
}

// benchFreezeThaw freezes and thaws an empty cgroup.
func benchFreezeThaw(b *testing.B, cg PodCgroup) {
	for b.Loop() {
		if err := cg.Freeze(); err != nil {
			b.Fatal(err)
		}
		if err := cg.Thaw(); err != nil {
			b.Fatal(err)
		}
	}
}
