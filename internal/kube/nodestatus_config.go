package kube

import (
	"context"
	"maps"

	corev1 "k8s.io/api/core/v1"

	"github.com/evictiond/evictiond/internal/policy"
)

// NodeStatusOptionsFromConfig maps the configuration's nodeStatus section (and dryRun)
// onto NodeStatusOptions; the caller adds NodeName, Clock and Logger.
func NodeStatusOptionsFromConfig(c *policy.Config) NodeStatusOptions {
	// Every pressure condition is named: one missing from the configuration's taints
	// is disabled there, not left to NodeStatusOptions' defaults.
	effects := map[corev1.NodeConditionType]corev1.TaintEffect{corev1.NodeMemoryPressure: "", corev1.NodeDiskPressure: "", corev1.NodePIDPressure: ""}
	for cond, e := range c.NodeStatus.Taints {
		effects[cond] = e
	}
	return NodeStatusOptions{Conditions: ConditionsMode(c.NodeStatus.Conditions), TaintEffects: effects,
		ReassertInterval: c.NodeStatus.ReassertInterval, DryRun: c.DryRun}
}

// Reconfigure applies new options on a configuration reload (conditions mode, taints,
// dry run switched). Entering dry run first releases what the writer holds, with the
// old options: dry run writes nothing, and entries nobody maintains must not stay True.
// Changed settings make the next sync reconcile the node from scratch, as a writer
// started with them would: what the old settings published and the new ones do not is
// released. The re-assert interval takes effect on restart. On error nothing changes.
func (s *NodeStatus) Reconfigure(ctx context.Context, opts NodeStatusOptions) error {
	opts.setDefaults()
	if err := opts.validate(); err != nil {
		return err
	}
	s.syncMu.Lock()
	old := s.opts
	s.syncMu.Unlock()
	if !old.DryRun && opts.DryRun {
		s.SetConditions(nil, nil)
		if err := s.Sync(ctx); err != nil {
			old.Logger.Warn("node status not released before entering dry run", "node", old.NodeName, "err", err)
		}
	}
	s.syncMu.Lock()
	if old.Conditions != opts.Conditions || !maps.Equal(old.TaintEffects, opts.TaintEffects) || old.DryRun != opts.DryRun {
		s.adopted = false
		s.held = map[corev1.NodeConditionType]bool{}
	}
	s.opts = opts
	s.lastDryRun = ""
	s.syncMu.Unlock()
	s.kick()
	return nil
}
