package simulate

import (
	"context"

	v1 "k8s.io/api/core/v1"

	"github.com/evictiond/evictiond/internal/policy"
)

// scenarioOwners names a workload as the scenario's pods do: a scenario holds
// no Deployments to read a UID from (the daemon reads the API server's).
type scenarioOwners struct{}

func (scenarioOwners) Reference(_ context.Context, w policy.Workload) (*v1.ObjectReference, error) {
	return &v1.ObjectReference{Kind: w.Kind, APIVersion: w.APIVersion, Namespace: w.Namespace, Name: w.Name, UID: w.UID}, nil
}

// LoopResult is an eviction loop seen in a step: the workload whose pods the
// node keeps evicting, and the backoff its eviction set
// (docs/operations.md, "Eviction loops").
type LoopResult struct {
	Workload string `json:"workload"`
	// Kind is the workload's kind as the metric labels it.
	Kind string `json:"kind"`
	// Evictions in the loop, this one included.
	Evictions int  `json:"evictions"`
	Started   bool `json:"started"`
	// Backoff is how long the node's pressure condition (and evictiond's
	// taint) is held from this eviction; Until is when it ends.
	Backoff string `json:"backoff"`
	Until   string `json:"until"`
	// Event is the EvictionLoop Warning recorded on the workload.
	Event string `json:"event"`
}

func loopResults(verdicts []policy.LoopVerdict, node string) []LoopResult {
	var out []LoopResult
	for _, v := range verdicts {
		out = append(out, LoopResult{Workload: v.Workload.String(), Kind: v.Workload.MetricKind(), Evictions: v.Count,
			Started: v.Started, Backoff: v.Backoff.String(), Until: v.Until.Sub(Epoch).String(), Event: v.Describe(node)})
	}
	return out
}
