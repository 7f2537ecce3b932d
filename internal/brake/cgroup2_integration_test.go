//go:build integration && cgroup2

package brake

// cgroup v2 twins of the v1 tests, run by `make test-cgroup2` inside a VM
// booted with cgroup v2 only (internal/testenv/vm): cgroup.freeze, and
// cgroup.kill for the kill.

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/util/uuid"

	"github.com/evictiond/evictiond/internal/testenv/vm"
)

const v2Mount = "/sys/fs/cgroup"

func newV2Pod(t *testing.T) *testPod {
	t.Helper()
	vm.RequireCgroup2(t, "memory", "pids")
	root := filepath.Join(v2Mount, "evictiond-brake-"+string(uuid.NewUUID())[:8])
	pod := filepath.Join(root, "pod"+string(uuid.NewUUID()))
	ctr := filepath.Join(pod, "ctr")
	for _, d := range []string{root, pod} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(d, "cgroup.subtree_control"), []byte("+memory +pids"), 0o644); err != nil {
			t.Fatalf("delegating memory and pids in %s: %v", d, err)
		}
	}
	if err := os.Mkdir(ctr, 0o755); err != nil {
		t.Fatal(err)
	}
	p := &testPod{pod: PodCgroup{Version: V2, Dir: pod}, memory: filepath.Join(pod, "memory.current"),
		procs: []string{filepath.Join(ctr, "cgroup.procs")}, leafTasks: []string{filepath.Join(ctr, "cgroup.procs")}}
	p.checkFrozen = func(t *testing.T) {
		// The kernel reports the container below the pod frozen too.
		events, err := os.ReadFile(filepath.Join(ctr, "cgroup.events"))
		if err != nil || !strings.Contains(string(events), "frozen 1") {
			t.Errorf("container cgroup.events = %q (%v), want frozen 1", events, err)
		}
	}
	t.Cleanup(func() {
		_ = p.pod.Thaw()
		for _, d := range []string{ctr, pod, root} {
			if err := removeCgroup(d); err != nil {
				t.Errorf("removing %s: %v", d, err)
			}
		}
	})
	return p
}

func TestCgroup2_FrozenPodMemoryStaysFlatThawedItGrows(t *testing.T) {
	testFrozenPodMemoryStaysFlatThawedItGrows(t, newV2Pod(t))
}

func TestCgroup2_KillEndsEveryTaskOfAFrozenPod(t *testing.T) {
	p := newV2Pod(t)
	if _, err := os.Stat(filepath.Join(p.pod.Dir, "cgroup.kill")); err != nil {
		t.Fatalf("this kernel has no cgroup.kill (Linux 5.14+): %v", err)
	}
	testKillEndsEveryTaskOfAFrozenPod(t, p)
	events, err := os.ReadFile(filepath.Join(p.pod.Dir, "cgroup.events"))
	if err != nil || !strings.Contains(string(events), "populated 0") {
		t.Errorf("after Kill the pod's cgroup.events = %q (%v), want populated 0", events, err)
	}
}

func TestCgroup2_BrakeHoldThawsAtItsDeadline(t *testing.T) {
	testHoldThawsAtItsDeadline(t, newV2Pod(t))
}
