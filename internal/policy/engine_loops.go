package policy

import (
	"slices"
	"time"

	v1 "k8s.io/api/core/v1"
)

// HoldConditionUntil keeps cond in Assessment.Conditions until at least
// until, whatever the thresholds say: an eviction loop's backoff (the node
// stays unschedulable through evictiond's taint while the looping workload's
// replacement would land on it again). A later call with an earlier time does
// not shorten the hold.
func (e *Engine) HoldConditionUntil(cond v1.NodeConditionType, until time.Time) {
	if e.conditionHolds == nil {
		e.conditionHolds = map[v1.NodeConditionType]time.Time{}
	}
	if until.After(e.conditionHolds[cond]) {
		e.conditionHolds[cond] = until
	}
}

// ReleaseConditionHolds ends every HoldConditionUntil at once (loops turned
// off by a reload).
func (e *Engine) ReleaseConditionHolds() { clear(e.conditionHolds) }

// withHeldConditions adds the conditions held by HoldConditionUntil to conds,
// in the order nodeConditionsObservedSince uses, and forgets ended holds.
func (e *Engine) withHeldConditions(conds []v1.NodeConditionType, now time.Time) []v1.NodeConditionType {
	if len(e.conditionHolds) == 0 {
		return conds
	}
	for c, until := range e.conditionHolds {
		if !now.Before(until) {
			delete(e.conditionHolds, c)
			continue
		}
		if !slices.Contains(conds, c) {
			conds = append(conds, c)
		}
	}
	order := []v1.NodeConditionType{v1.NodeMemoryPressure, v1.NodeDiskPressure, v1.NodePIDPressure}
	slices.SortFunc(conds, func(a, b v1.NodeConditionType) int { return slices.Index(order, a) - slices.Index(order, b) })
	return conds
}
