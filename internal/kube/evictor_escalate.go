package kube

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"

	"github.com/evictiond/evictiond/internal/eviction"
)

// EventReasonEvictionEscalated is the Event on a pod whose soft eviction was
// requested again with the hard grace period.
const EventReasonEvictionEscalated = "EvictionEscalated"

// requestAgain asks the API server to evict, with its hard grace period, a
// pod whose soft eviction is in flight (policy.Candidate.Escalated): the
// Eviction API deletes a terminating pod without its budget, and a delete
// with a shorter grace period shortens the pending one, which the kubelet
// honours. It is the same disruption, so it takes no token and starts no
// cool-down; a hard eviction of another pod in the same pass is not held
// back by it.
func (e *Evictor) requestAgain(ctx context.Context, c Candidate) eviction.Result {
	opts := e.options()
	res := eviction.Result{}
	if c.Pod.Spec.NodeName != opts.NodeName {
		res.Outcome = eviction.OutcomeNoCandidates
		res.Err = fmt.Errorf("candidate %s/%s: spec.nodeName %q: must be this node %q", c.Pod.Namespace, c.Pod.Name, c.Pod.Spec.NodeName, opts.NodeName)
		return res
	}
	if opts.DryRun {
		opts.Logger.Info("would request the eviction again with the hard grace period", podAttrs(c)...)
		res.Outcome, res.Victim = eviction.OutcomeDryRun, &c
		return res
	}
	err := e.evictThroughAPI(ctx, c)
	e.noteReachability(err)
	outcome := classify(err)
	res.Attempts = append(res.Attempts, eviction.Attempt{Pod: podKey(c.Pod), UID: c.Pod.UID, Action: "evict", Outcome: outcome, Err: err})
	if outcome != eviction.OutcomeEvicted {
		res.Outcome, res.Err = outcome, err
		opts.Logger.Warn("escalated eviction not done", append(podAttrs(c), "outcome", outcome, "err", err)...)
		return res
	}
	e.recorder.AnnotatedEventf(c.Pod, c.Annotations, corev1.EventTypeWarning, EventReasonEvictionEscalated,
		"Grace period shortened to %ds: %s", c.GracePeriodSeconds, c.Reason)
	opts.Logger.Info("eviction requested again with the hard grace period", podAttrs(c)...)
	res.Outcome, res.Victim = eviction.OutcomeEvicted, &c
	return res
}
