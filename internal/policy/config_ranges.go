package policy

import (
	"fmt"

	"k8s.io/apimachinery/pkg/api/resource"
)

// Largest plausible threshold quantity of each resource. A threshold above
// every node's capacity is met all the time and evicts every pod it can: an
// "available < 1Ei" memory threshold is a typo, not a policy.
var maxThresholdQuantity = map[Resource]resource.Quantity{
	// More memory than any machine has (the largest hold tens of TiB).
	ResourceMemory: resource.MustParse("64Ti"),
	ResourceSwap:   resource.MustParse("64Ti"),
	// More than any node-local filesystem.
	ResourceEphemeralStorage: resource.MustParse("64Pi"),
	// The kernel's PID_MAX_LIMIT (pid_max cannot be set higher).
	ResourcePIDs: *resource.NewQuantity(4194304, resource.DecimalSI),
}

// checkThresholdRange rejects a quantity no node can have; "" when it is in range.
func checkThresholdRange(sig Signal, v ThresholdValue) string {
	if sig.IsPSI() || v.Quantity == nil {
		return ""
	}
	limit, ok := maxThresholdQuantity[sig.Resource()]
	if !ok || v.Quantity.Cmp(limit) <= 0 {
		return ""
	}
	return fmt.Sprintf("must be at most %s: a threshold above the node's capacity is always met and evicts every pod", limit.String())
}

// softNotAboveHard warns of a soft threshold that can never be met before the
// hard threshold of its signal: soft thresholds exist to act earlier and more
// gently. A warning, not an error: such a soft threshold is inert, and a node
// pool of the chart that raises a hard threshold inherits the default soft one
// (750Mi below a pool's 2Gi), which must not stop the agent. Both must be quantities or both percentages to be compared (a
// percentage depends on the node's capacity). PSI thresholds are compared as
// headroom, where a soft one must also be the larger.
func softNotAboveHard(ts []Threshold, hardGiven map[string]string) (warnings []string) {
	hard := map[Signal]Threshold{}
	for _, t := range ts {
		if t.Hard() && t.DerivedFrom == "" {
			hard[t.Signal] = t
		}
	}
	for _, s := range ts {
		h, ok := hard[s.Signal]
		if s.Hard() || !ok {
			continue
		}
		var below bool
		switch {
		case s.Value.IsQuantity() && h.Value.IsQuantity():
			below = s.Value.Quantity.Cmp(*h.Value.Quantity) <= 0
		case s.Value.Quantity == nil && h.Value.Quantity == nil: // both plain percentages
			below = s.Value.Percentage <= h.Value.Percentage
		default:
			continue
		}
		if !below {
			continue
		}
		where := "evictionHard[" + string(s.Signal) + "]"
		if _, given := hardGiven[string(s.Signal)]; !given {
			where += " (the default)"
		}
		rule := "must be above " + where + " (" + h.Raw + "): a soft threshold at or below the hard one is never acted on before it"
		if s.Signal.IsPSI() {
			rule = "must be below " + where + " (" + h.Raw + "): a soft stall threshold at or above the hard one is never acted on before it"
		}
		warnings = append(warnings, fmt.Sprintf("evictionSoft[%s]: %q: %s", s.Signal, s.Raw, rule))
	}
	return warnings
}
