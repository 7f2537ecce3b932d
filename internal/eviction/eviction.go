// Package eviction is the vocabulary the loop and the parts it drives share:
// how an eviction request ended (Outcome, Attempt, Result) and what a
// node-level reclaim step freed (ReclaimResult). The loop (internal/agent),
// the evictor (internal/kube) and the reclaimer (internal/reclaim) all import
// it, so none of them imports another to speak.
package eviction

import (
	"k8s.io/apimachinery/pkg/types"

	"github.com/evictiond/evictiond/internal/policy"
)

// Outcome is how one eviction request ended; the values are the
// evictiond_evictions_total "result" label (docs/metrics.md).
type Outcome string

const (
	OutcomeEvicted        Outcome = "evicted"         // the Eviction API accepted
	OutcomeDeleted        Outcome = "deleted"         // hard escalation deleted a PDB-protected pod
	OutcomeStoppedLocally Outcome = "stopped_locally" // API unreachable; stopped through the CRI
	OutcomeDryRun         Outcome = "dry_run"         // would have evicted Result.Victim
	OutcomePDBBlocked     Outcome = "pdb_blocked"     // every candidate tried was refused
	OutcomeGone           Outcome = "gone"            // the candidate vanished or was replaced (NotFound / UID conflict)
	OutcomeThrottled      Outcome = "throttled"       // API priority and fairness answered 429
	OutcomeRateLimited    Outcome = "rate_limited"    // evictiond's token bucket is empty
	OutcomeCoolingDown    Outcome = "cooling_down"    // within the cool-down of the last eviction
	OutcomeAPIError       Outcome = "api_error"       // API unreachable or failing
	OutcomeNoCandidates   Outcome = "no_candidates"
)

// Disrupted is true for the outcomes that took a pod down (or, in dry run,
// would have): the engine then waits for the victim to be gone.
func (o Outcome) Disrupted() bool {
	return o == OutcomeEvicted || o == OutcomeDeleted || o == OutcomeStoppedLocally
}

// Attempt is one request an evictor made for one candidate.
type Attempt struct {
	Pod     types.NamespacedName
	UID     types.UID
	Action  string // "evict", "delete" or "local-stop"
	Outcome Outcome
	Err     error
}

// Result is what an evictor did with a ranked candidate list.
type Result struct {
	Outcome Outcome
	// Victim is the candidate evicted, deleted or stopped (in dry run: chosen).
	Victim   *policy.Candidate
	Attempts []Attempt
	Err      error
}

// ReclaimResult is one node-level reclaim step's outcome.
type ReclaimResult struct {
	// Freed is measured by statfs before and after, in the signal's unit.
	Freed int64
	Items int
	Err   error
}
