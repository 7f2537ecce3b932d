package simulate

import (
	"context"
	"fmt"
	"io"

	v1 "k8s.io/api/core/v1"

	"github.com/evictiond/evictiond/internal/agent"
	"github.com/evictiond/evictiond/internal/eviction"
	"github.com/evictiond/evictiond/internal/policy"
)

// MemoryReclaimResult is reclaim before evict's run in a step
// (memoryReclaim in the configuration): the memory signal near its
// threshold, the numbers, each pod asked and what it gave back.
type MemoryReclaimResult struct {
	Signal    string `json:"signal"`
	Available string `json:"available"`
	Threshold string `json:"threshold"`
	Trigger   string `json:"trigger"`
	Need      string `json:"need"`
	// After is the signal's available once reclaimed ("" when no pod was asked).
	After string `json:"after,omitempty"`
	// EvictionAvoided: a hard memory threshold was met before and none after.
	EvictionAvoided bool                  `json:"evictionAvoided"`
	Pods            []MemoryReclaimPodOut `json:"pods"`
	Skipped         []ExcludedResult      `json:"skipped,omitempty"`
}

// MemoryReclaimPodOut is one pod asked.
type MemoryReclaimPodOut struct {
	Pod    string `json:"pod"`
	Ask    string `json:"ask"`
	Freed  string `json:"freed"`
	Error  string `json:"error,omitempty"`
	Reason string `json:"reason"`
}

func memoryReclaimResult(r *agent.MemoryReclaimReport) *MemoryReclaimResult {
	if r == nil {
		return nil
	}
	p := r.Plan
	out := &MemoryReclaimResult{Signal: string(p.Signal), Available: fmtMem(p.Available), Threshold: fmtMem(p.Threshold),
		Trigger: fmtMem(p.Trigger), Need: fmtMem(p.Need), EvictionAvoided: r.EvictionAvoided, Pods: []MemoryReclaimPodOut{}}
	if r.After >= 0 {
		out.After = fmtMem(r.After)
	}
	for i, t := range p.Targets {
		po := MemoryReclaimPodOut{Pod: key(t.Pod), Ask: fmtMem(t.Ask), Reason: t.Reason}
		if i < len(r.Results) {
			po.Freed = fmtMem(max(r.Results[i].Freed, 0))
			if err := r.Results[i].Err; err != nil {
				po.Error = err.Error()
			}
		}
		out.Pods = append(out.Pods, po)
	}
	for _, s := range p.Skipped {
		out.Skipped = append(out.Skipped, ExcludedResult{Pod: key(s.Pod), Reason: s.Reason})
	}
	return out
}

func writeMemoryReclaimText(w io.Writer, m *MemoryReclaimResult) {
	if m == nil {
		return
	}
	fmt.Fprintf(w, "  memory reclaim: %s at %s, below threshold %s + margin (%s); need %s\n", m.Signal, m.Available, m.Threshold, m.Trigger, m.Need)
	for _, p := range m.Pods {
		if p.Error != "" {
			fmt.Fprintf(w, "    %s: asked %s, failed: %s\n", p.Pod, p.Ask, p.Error)
			continue
		}
		fmt.Fprintf(w, "    %s: asked %s, freed %s (%s)\n", p.Pod, p.Ask, p.Freed, p.Reason)
	}
	for _, s := range m.Skipped {
		fmt.Fprintf(w, "    passed over %s: %s\n", s.Pod, s.Reason)
	}
	if m.After != "" {
		fmt.Fprintf(w, "    %s after reclaim: %s\n", m.Signal, m.After)
	}
	if m.EvictionAvoided {
		fmt.Fprintf(w, "    the hard threshold is no longer met: no eviction\n")
	}
}

func fmtMem(n int64) string { return policy.FormatValue(policy.SignalMemoryAvailable, n) }

// ReclaimPodMemory takes back up to bytes of the pod's page cache
// (podStats memoryFile): its working set and page cache shrink by what is
// taken, and memory.available and allocatableMemory.available gain it, read
// now — what memory.reclaim does to clean page cache on a node without swap.
func (n *Node) ReclaimPodMemory(ctx context.Context, pod *v1.Pod, bytes int64) eviction.ReclaimResult {
	n.mu.Lock()
	defer n.mu.Unlock()
	st, ok := n.stats[pod.UID]
	if !ok || st.MemoryFile == nil {
		return eviction.ReclaimResult{Items: 1}
	}
	freed := min(bytes, *st.MemoryFile)
	file := *st.MemoryFile - freed
	st.MemoryFile = &file
	if st.MemoryWorkingSet != nil {
		ws := max(*st.MemoryWorkingSet-freed, 0)
		st.MemoryWorkingSet = &ws
	}
	n.stats[pod.UID] = st
	now := n.now()
	for _, s := range []policy.Signal{policy.SignalMemoryAvailable, policy.SignalAllocatableMemoryAvailable} {
		if o, ok := n.obs[s]; ok {
			o.Available = min(o.Available+freed, o.Capacity)
			o.Time = now
			n.obs[s] = o
		}
	}
	return eviction.ReclaimResult{Freed: freed, Items: 1}
}
