//go:build integration && cgroup2

package brake

// cgroup v2 twins of the freezer tests, run by `make test-cgroup2` inside a
// VM booted with cgroup v2 only (internal/testenv/vm): cgroup.freeze and
// cgroup.kill on a pod cgroup of the real unified hierarchy, with the
// workloads of the v1 tests (TestMain) in a container cgroup below it.

import (
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/uuid"

	"github.com/evictiond/evictiond/internal/testenv/vm"
)

const v2Mount = "/sys/fs/cgroup"

// v2Pod is <private parent>/pod<uid>/ctr in the unified hierarchy, memory
// and pids delegated down to the container.
type v2Pod struct {
	pod PodCgroup
	ctr string
}

func newV2Pod(t *testing.T) *v2Pod {
	t.Helper()
	vm.RequireCgroup2(t, "memory", "pids")
	parent := filepath.Join(v2Mount, "evictiond-brake-"+string(uuid.NewUUID())[:8])
	pod := filepath.Join(parent, "pod"+string(uuid.NewUUID()))
	p := &v2Pod{pod: PodCgroup{Version: V2, Dir: pod}, ctr: filepath.Join(pod, "ctr")}
	for _, d := range []string{parent, pod} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatalf("creating %s: %v", d, err)
		}
		if err := os.WriteFile(filepath.Join(d, "cgroup.subtree_control"), []byte("+memory +pids"), 0o644); err != nil {
			t.Fatalf("delegating memory and pids in %s: %v", d, err)
		}
	}
	if err := os.Mkdir(p.ctr, 0o755); err != nil {
		t.Fatalf("creating %s: %v", p.ctr, err)
	}
	t.Cleanup(func() {
		_ = p.pod.Thaw()
		for _, d := range []string{p.ctr, pod, parent} {
			if err := removeCgroup(d); err != nil {
				t.Errorf("removing %s: %v", d, err)
			}
		}
	})
	return p
}

// start runs a workload of TestMain in the container cgroup.
func (p *v2Pod) start(t *testing.T, mode string) (*exec.Cmd, <-chan error) {
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
	if err := os.WriteFile(filepath.Join(p.ctr, "cgroup.procs"), []byte(strconv.Itoa(cmd.Process.Pid)), 0o644); err != nil {
		t.Fatalf("moving %d into %s: %v", cmd.Process.Pid, p.ctr, err)
	}
	if _, err := io.WriteString(stdin, "go\n"); err != nil {
		t.Fatal(err)
	}
	return cmd, done
}

func (p *v2Pod) memoryCurrent(t *testing.T) int64 {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(p.pod.Dir, "memory.current"))
	if err != nil {
		t.Fatal(err)
	}
	v, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// events reads a key of a cgroup's cgroup.events (populated, frozen).
func events(t *testing.T, dir, key string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, "cgroup.events"))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, key+" "); ok {
			return v
		}
	}
	t.Fatalf("no %q in %s/cgroup.events: %q", key, dir, b)
	return ""
}

func TestCgroup2FrozenPodMemoryStaysFlatThawedItGrows(t *testing.T) {
	p := newV2Pod(t)
	_, _ = p.start(t, "alloc")
	waitFor(t, 30*time.Second, "the allocator to pass 32 MiB", func() bool { return p.memoryCurrent(t) > 32<<20 })

	start := time.Now()
	if err := p.pod.Freeze(); err != nil {
		t.Fatal(err)
	}
	t.Logf("froze in %v", time.Since(start))
	if frozen, err := p.pod.Frozen(); err != nil || !frozen {
		t.Fatalf("Frozen() = %v, %v after Freeze", frozen, err)
	}
	for _, dir := range []string{p.pod.Dir, p.ctr} {
		if got := events(t, dir, "frozen"); got != "1" {
			t.Errorf("%s/cgroup.events: frozen %s, want 1 (the kernel's own view)", dir, got)
		}
	}
	atFreeze := p.memoryCurrent(t)
	time.Sleep(500 * time.Millisecond)
	if later := p.memoryCurrent(t); later > atFreeze+1<<20 {
		t.Errorf("frozen pod grew from %d to %d MiB in 500ms", atFreeze>>20, later>>20)
	}

	if err := p.pod.Thaw(); err != nil {
		t.Fatal(err)
	}
	if frozen, err := p.pod.Frozen(); err != nil || frozen {
		t.Fatalf("Frozen() = %v, %v after Thaw", frozen, err)
	}
	waitFor(t, 20*time.Second, "the thawed allocator to grow 16 MiB", func() bool { return p.memoryCurrent(t) > atFreeze+16<<20 })
}

func TestCgroup2KillEndsEveryTaskOfAFrozenPod(t *testing.T) {
	p := newV2Pod(t)
	alloc, allocDone := p.start(t, "alloc")
	forker, forkerDone := p.start(t, "fork")
	waitFor(t, 60*time.Second, "the forker to start 20 children", func() bool {
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
	time.Sleep(300 * time.Millisecond)
	if later, _ := p.pod.Pids(); len(later) != len(frozenPids) {
		t.Errorf("frozen pod's processes went from %d to %d: the forker still forks", len(frozenPids), len(later))
	}

	start := time.Now()
	n, err := p.pod.Kill(10 * time.Second)
	if err != nil {
		t.Fatal(err)
	}
	took := time.Since(start)
	if n != len(frozenPids) {
		t.Errorf("Kill reported %d processes, want the %d of the frozen pod", n, len(frozenPids))
	}
	for name, done := range map[string]<-chan error{"allocator": allocDone, "forker": forkerDone} {
		select {
		case err := <-done:
			var exit *exec.ExitError
			if !errors.As(err, &exit) || exit.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
				t.Errorf("%s ended with %v, want SIGKILL (cgroup.kill)", name, err)
			}
		case <-time.After(10 * time.Second):
			t.Errorf("%s still running 10s after Kill", name)
		}
	}
	waitFor(t, 10*time.Second, "cgroup.events populated 0", func() bool { return events(t, p.pod.Dir, "populated") == "0" })
	if frozen, err := p.pod.Frozen(); err != nil || frozen {
		t.Errorf("after Kill the pod cgroup is frozen=%v (%v), want thawed", frozen, err)
	}
	t.Logf("cgroup.kill ended %d processes (allocator %d, forker %d and its children) in %v", n, alloc.Process.Pid, forker.Process.Pid, took)
}

func TestCgroup2BrakeHoldThawsAtItsDeadline(t *testing.T) {
	p := newV2Pod(t)
	_, _ = p.start(t, "alloc")
	waitFor(t, 30*time.Second, "the allocator to pass 16 MiB", func() bool { return p.memoryCurrent(t) > 16<<20 })
	expired := make(chan Hold, 1)
	b := New(func(h Hold, err error) {
		if err != nil {
			t.Errorf("thaw at the deadline: %v", err)
		}
		expired <- h
	})
	h, err := b.Freeze("uid-1", "default/alloc", p.pod, 500*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("froze in %v", h.FreezeTook)
	select {
	case got := <-expired:
		if got.UID != "uid-1" {
			t.Errorf("expired hold %+v", got)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the hold did not end at its 500ms deadline")
	}
	if frozen, err := p.pod.Frozen(); err != nil || frozen {
		t.Errorf("after the deadline the pod is frozen=%v (%v)", frozen, err)
	}
	if got := events(t, p.pod.Dir, "frozen"); got != "0" {
		t.Errorf("cgroup.events: frozen %s after the deadline, want 0", got)
	}
}
