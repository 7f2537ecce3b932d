//go:build integration

package brake

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

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
