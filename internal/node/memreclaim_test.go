package node

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/evictiond/evictiond/internal/agent"
	"github.com/evictiond/evictiond/internal/brake"
)

// What the kernel's answers mean is decided here; the real write is
// exercised on the v2 node (test/nodev2, ReclaimBeforeEvict).
func TestReclaimCgroupMemoryTellsUnsupportedFromGone(t *testing.T) {
	if r := reclaimCgroupMemory(brake.PodCgroup{Version: brake.V1, Dir: t.TempDir()}, 1<<20); !errors.Is(r.Err, agent.ErrMemoryReclaimUnsupported) {
		t.Errorf("cgroup v1: err %v, want ErrMemoryReclaimUnsupported", r.Err)
	}
	old := t.TempDir() // a v2 cgroup of a kernel before 5.19: no memory.reclaim
	if err := os.WriteFile(filepath.Join(old, "memory.current"), []byte("1048576\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if r := reclaimCgroupMemory(brake.PodCgroup{Version: brake.V2, Dir: old}, 1<<20); !errors.Is(r.Err, agent.ErrMemoryReclaimUnsupported) {
		t.Errorf("no memory.reclaim: err %v, want ErrMemoryReclaimUnsupported", r.Err)
	}
	gone := filepath.Join(t.TempDir(), "pod-gone")
	if r := reclaimCgroupMemory(brake.PodCgroup{Version: brake.V2, Dir: gone}, 1<<20); r.Err == nil || errors.Is(r.Err, agent.ErrMemoryReclaimUnsupported) {
		t.Errorf("a pod cgroup that is gone: err %v, want an error that does not turn reclaim off", r.Err)
	}
}
