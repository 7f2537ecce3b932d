package node

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"

	"github.com/opencontainers/cgroups"
	"golang.org/x/sys/unix"
	v1 "k8s.io/api/core/v1"

	"github.com/evictiond/evictiond/internal/agent"
	"github.com/evictiond/evictiond/internal/brake"
	"github.com/evictiond/evictiond/internal/eviction"
	"github.com/evictiond/evictiond/internal/nodefs"
)

// ReclaimPodMemory writes bytes to the pod cgroup's memory.reclaim (cgroup
// v2, kernel 5.19+): the kernel reclaims from the pod's LRU lists as it would
// under the pod's own limit — page cache without swap, anonymous memory too
// with swap — and returns when it has, or with EAGAIN when it could not take
// all of it (not an error: what was freed is measured). The write blocks for
// the reclaim; memoryReclaim.maxPerPass bounds it.
func (n *Node) ReclaimPodMemory(ctx context.Context, pod *v1.Pod, bytes int64) eviction.ReclaimResult {
	cg, err := n.M.PodCgroup(pod)
	if err != nil {
		return eviction.ReclaimResult{Err: fmt.Errorf("memory reclaim of pod %s/%s: locating its cgroup: %w", pod.Namespace, pod.Name, err)}
	}
	return reclaimCgroupMemory(cg, bytes)
}

// reclaimCgroupMemory asks the kernel for bytes from one cgroup and measures
// memory.current before and after.
func reclaimCgroupMemory(cg brake.PodCgroup, bytes int64) eviction.ReclaimResult {
	if cg.Version != brake.V2 {
		return eviction.ReclaimResult{Err: agent.ErrMemoryReclaimUnsupported}
	}
	current := filepath.Join(cg.Dir, "memory.current")
	before, err := nodefs.ReadInt64(current)
	if err != nil {
		return eviction.ReclaimResult{Err: err}
	}
	err = cgroups.WriteFile(cg.Dir, "memory.reclaim", strconv.FormatInt(bytes, 10))
	switch {
	case errors.Is(err, fs.ErrNotExist):
		if _, serr := os.Stat(current); serr != nil {
			return eviction.ReclaimResult{Err: fmt.Errorf("memory reclaim of %s: the cgroup is gone: %w", cg.Dir, err)}
		}
		return eviction.ReclaimResult{Err: fmt.Errorf("%w: %v", agent.ErrMemoryReclaimUnsupported, err)}
	case errors.Is(err, unix.EAGAIN):
		err = nil // less than asked was reclaimable
	case err != nil:
		return eviction.ReclaimResult{Err: fmt.Errorf("memory reclaim of %s: %w", cg.Dir, err)}
	}
	after, err := nodefs.ReadInt64(current)
	if err != nil {
		return eviction.ReclaimResult{Err: err}
	}
	return eviction.ReclaimResult{Freed: before - after, Items: 1}
}
