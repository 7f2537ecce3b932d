//go:build integration

package brake

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/uuid"
)

const v1Mount = "/sys/fs/cgroup"

// newV1Pod is a pod cgroup (with one container cgroup) in this machine's v1
// freezer and memory hierarchies, under a private parent removed at the end.
func newV1Pod(t *testing.T) *testPod {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Fatal("this test writes cgroups: run it as root (make test-brake)")
	}
	if _, err := os.Stat(filepath.Join(v1Mount, "freezer", "cgroup.procs")); err != nil {
		t.Fatalf("%s/freezer is not a cgroup v1 freezer hierarchy: this tier needs the v1 freezer controller mounted: %v", v1Mount, err)
	}
	root := "evictiond-brake-" + string(uuid.NewUUID())[:8]
	podDir := "pod" + string(uuid.NewUUID())
	p := &testPod{pod: PodCgroup{Version: V1, Dir: filepath.Join(v1Mount, "freezer", root, podDir)},
		memory: filepath.Join(v1Mount, "memory", root, podDir, "memory.usage_in_bytes")}
	var dirs []string
	for _, ctl := range []string{"freezer", "memory"} {
		ctr := filepath.Join(v1Mount, ctl, root, podDir, "ctr")
		if err := os.MkdirAll(ctr, 0o755); err != nil {
			t.Fatalf("creating %s: %v", ctr, err)
		}
		p.procs = append(p.procs, filepath.Join(ctr, "cgroup.procs"))
		p.leafTasks = append(p.leafTasks, filepath.Join(ctr, "tasks"))
		dirs = append(dirs, ctr, filepath.Dir(ctr), filepath.Join(v1Mount, ctl, root))
	}
	p.checkFrozen = func(t *testing.T) {
		// The container cgroup below the pod is frozen with it.
		state, err := os.ReadFile(filepath.Join(filepath.Dir(p.procs[0]), "freezer.state"))
		if err != nil || strings.TrimSpace(string(state)) != "FROZEN" {
			t.Errorf("container freezer.state = %q (%v), want FROZEN", state, err)
		}
	}
	t.Cleanup(func() {
		_ = p.pod.Thaw()
		for _, d := range dirs {
			if err := removeCgroup(d); err != nil {
				t.Errorf("removing %s: %v", d, err)
			}
		}
	})
	return p
}

func TestV1_FrozenPodMemoryStaysFlatThawedItGrows(t *testing.T) {
	testFrozenPodMemoryStaysFlatThawedItGrows(t, newV1Pod(t))
}

func TestV1_KillEndsEveryTaskOfAFrozenPod(t *testing.T) {
	testKillEndsEveryTaskOfAFrozenPod(t, newV1Pod(t))
}

func TestV1_BrakeHoldThawsAtItsDeadline(t *testing.T) {
	testHoldThawsAtItsDeadline(t, newV1Pod(t))
}

// A task that allocates at its memory cgroup's limit with the OOM killer
// disabled sleeps in the kernel (killable, not freezable) and keeps the pod
// FREEZING, as the e2e tier's hog at kubepods' limit did on a busy node. The
// brake holds it all the same within freezeSettle, leaving the freeze
// written, and its kill ends the task there.
func TestV1_BrakeHoldsAPodStuckInTheKernelAndKillsIt(t *testing.T) {
	p := newV1Pod(t)
	mem := filepath.Dir(p.memory)
	for file, v := range map[string]string{"memory.limit_in_bytes": "64M", "memory.oom_control": "1"} {
		if err := os.WriteFile(filepath.Join(mem, file), []byte(v), 0o644); err != nil {
			t.Fatalf("writing %s of %s: %v", file, mem, err)
		}
	}
	_, allocDone := p.start(t, "alloc")
	waitFor(t, 10*time.Second, "the allocator to reach the 64M limit", func() bool { return p.memoryUsage(t) >= 63<<20 })
	time.Sleep(100 * time.Millisecond)
	select {
	case err := <-allocDone:
		t.Fatalf("the allocator ended at the limit (%v): it should wait for memory there", err)
	default:
	}

	b := New(nil)
	start := time.Now()
	h, err := b.Freeze("stuck", "ns/stuck", p.pod, 10*time.Second)
	took := time.Since(start)
	if err != nil {
		t.Fatalf("Freeze: %v, want a hold of the still freezing pod", err)
	}
	if !errors.Is(h.StillFreezing, ErrStillFreezing) {
		t.Errorf("hold's StillFreezing = %v, want ErrStillFreezing (the allocator is in the kernel)", h.StillFreezing)
	}
	if took > freezeSettle+100*time.Millisecond {
		t.Errorf("Freeze took %v, want about freezeSettle (%v)", took, freezeSettle)
	}
	if state, err := os.ReadFile(filepath.Join(p.pod.Dir, "freezer.state")); err != nil || strings.TrimSpace(string(state)) != "FREEZING" {
		t.Errorf("freezer.state = %q (%v), want FREEZING: the freeze stays written", state, err)
	}
	if held := b.Held(); len(held) != 1 {
		t.Errorf("holds %v, want the still freezing pod", held)
	}

	if _, n, ok, err := b.Kill("stuck", 5*time.Second); err != nil || !ok || n != 1 {
		t.Fatalf("Kill: %d processes, ok %v, err %v; want the allocator killed", n, ok, err)
	}
	select {
	case err := <-allocDone:
		var exit *exec.ExitError
		if !errors.As(err, &exit) || exit.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
			t.Errorf("allocator ended with %v, want SIGKILL", err)
		}
	case <-time.After(5 * time.Second):
		t.Error("allocator still running 5s after Kill")
	}
	t.Logf("held still freezing after %v (%v)", took, h.StillFreezing)
}

func BenchmarkV1_FreezeThaw(b *testing.B) {
	if os.Geteuid() != 0 {
		b.Fatal("run as root")
	}
	root := filepath.Join(v1Mount, "freezer", "evictiond-brake-bench-"+string(uuid.NewUUID())[:8])
	if err := os.MkdirAll(root, 0o755); err != nil {
		b.Fatal(err)
	}
	defer func() { _ = removeCgroup(root) }()
	benchFreezeThaw(b, PodCgroup{Version: V1, Dir: root})
}
