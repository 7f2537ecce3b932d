package kube

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/clock"
)

// NodeStatusOptions configures a NodeStatus. Zero values take the documented defaults.
type NodeStatusOptions struct {
	// NodeName is this node.
	NodeName string
	// TaintEffects is the effect of evictiond's taint per pressure condition; a condition
	// missing from the map gets the default, and the effect "" (explicitly set) disables
	// that taint. Defaults:
	//   - DiskPressure, PIDPressure: NoSchedule. The kubelet's admission refuses every
	//     non-critical pod under these conditions, so keeping all new pods off is exact.
	//   - MemoryPressure: PreferNoSchedule. The kubelet refuses only BestEffort pods under
	//     memory pressure; a NoSchedule taint on evictiond's key would refuse Burstable and
	//     Guaranteed pods too (no admission plugin adds tolerations for it), which no
	//     platform team expects from a condition the kubelet itself treats as partial.
	//     The standard MemoryPressure condition evictiond holds True already makes the node
	//     lifecycle controller add node.kubernetes.io/memory-pressure:NoSchedule, which the
	//     scheduler applies the kubelet's way; evictiond's PreferNoSchedule adds the
	//     "place new pods elsewhere when you can" that is right for every QoS class.
	TaintEffects map[corev1.NodeConditionType]corev1.TaintEffect
	// DisableConditions leaves the pressure conditions alone and keeps only the taints
	// (config nodeStatus.conditions: false). Default false: conditions are written.
	DisableConditions bool
	// ReassertInterval is how often the node cache is compared with what evictiond wants,
	// in addition to every watch event on the node. A condition another writer flips is
	// re-asserted on its watch event (milliseconds), or at the latest after this
	// interval. Reading the cache costs no API call. Default 1 s.
	ReassertInterval time.Duration
	// APITimeout bounds each API call. Default 5 s.
	APITimeout time.Duration
	// DryRun logs each "would patch" once per change and writes nothing.
	DryRun bool
	// Clock drives the re-assert ticker and condition timestamps. Default the real clock.
	Clock clock.WithTicker
	// Logger receives one record per write. Default slog.Default().
	Logger *slog.Logger
}

// DefaultTaintEffects are the taint effects used for conditions missing from
// NodeStatusOptions.TaintEffects (see there for why).
func DefaultTaintEffects() map[corev1.NodeConditionType]corev1.TaintEffect {
	return map[corev1.NodeConditionType]corev1.TaintEffect{
		corev1.NodeMemoryPressure: corev1.TaintEffectPreferNoSchedule,
		corev1.NodeDiskPressure:   corev1.TaintEffectNoSchedule,
		corev1.NodePIDPressure:    corev1.TaintEffectNoSchedule,
	}
}

func (o *NodeStatusOptions) setDefaults() {
	effects := DefaultTaintEffects()
	for cond, effect := range o.TaintEffects {
		effects[cond] = effect
	}
	o.TaintEffects = effects
	if o.ReassertInterval <= 0 {
		o.ReassertInterval = time.Second
	}
	if o.APITimeout <= 0 {
		o.APITimeout = 5 * time.Second
	}
	if o.Clock == nil {
		o.Clock = clock.RealClock{}
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
}

func (o *NodeStatusOptions) validate() error {
	if o.NodeName == "" {
		return fmt.Errorf("node status: NodeName: value %q: must not be empty", o.NodeName)
	}
	for cond, effect := range o.TaintEffects {
		if _, ok := kindOf(cond); !ok {
			return fmt.Errorf("node status: TaintEffects[%s]: not a pressure condition: must be MemoryPressure, DiskPressure or PIDPressure", cond)
		}
		switch effect {
		case "", corev1.TaintEffectNoSchedule, corev1.TaintEffectPreferNoSchedule:
		default:
			// NoExecute would make the taint itself evict pods, bypassing PDBs and ranking.
			return fmt.Errorf("node status: TaintEffects[%s]: value %q: must be NoSchedule, PreferNoSchedule or empty (no taint)", cond, effect)
		}
	}
	return nil
}

// NodeStatus keeps the node's pressure conditions and evictiond's taints as the loop
// wants them, writing only what differs:
//   - a standard pressure condition is set True with reason Evictiond<X>Pressure while
//     the loop reports that pressure (the policy includes the transition period), and
//     re-asserted when another writer (the kubelet) flips it;
//   - when that pressure ends, the entry is set False with reason EvictiondNo<X>Pressure
//     once; an entry evictiond does not hold is never touched;
//   - taints with the evictiond.io/ prefix are exactly the configured ones for the
//     current pressures; no other taint is touched;
//   - the first sync adopts a True entry with evictiond's reason left by an earlier run
//     (and taints), so stale state is cleared when that pressure is not seen anymore.
type NodeStatus struct {
	client   kubernetes.Interface
	node     nodeGetter
	recorder record.EventRecorder
	opts     NodeStatusOptions
	trigger  chan struct{}

	mu      sync.Mutex
	desired map[corev1.NodeConditionType]bool
	haveSet bool

	syncMu      sync.Mutex
	adopted     bool
	held        map[corev1.NodeConditionType]bool
	lastWritten *corev1.Node // the node as our last write returned it
	lastDryRun  string
}

type nodeGetter interface {
	Get(name string) (*corev1.Node, error)
}

// NewNodeStatus builds a NodeStatus reading this node from informers (which it also
// watches for other writers' changes; call before informers.Start).
func NewNodeStatus(client kubernetes.Interface, informers *NodeInformers, recorder record.EventRecorder, opts NodeStatusOptions) (*NodeStatus, error) {
	opts.setDefaults()
	if err := opts.validate(); err != nil {
		return nil, err
	}
	s := &NodeStatus{
		client:   client,
		node:     informers.Node,
		recorder: recorder,
		opts:     opts,
		trigger:  make(chan struct{}, 1),
		desired:  map[corev1.NodeConditionType]bool{},
		held:     map[corev1.NodeConditionType]bool{},
	}
	err := informers.AddNodeHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { s.kick() },
		UpdateFunc: func(any, any) { s.kick() },
	})
	if err != nil {
		return nil, err
	}
	return s, nil
}

// SetConditions tells which pressure conditions hold now (as the policy reports them,
// transition period included). Nothing is written before the first call, so start-up
// never clears state on a guess.
func (s *NodeStatus) SetConditions(conditions []corev1.NodeConditionType) {
	desired := map[corev1.NodeConditionType]bool{}
	for _, c := range conditions {
		desired[c] = true
	}
	s.mu.Lock()
	s.desired, s.haveSet = desired, true
	s.mu.Unlock()
	s.kick()
}

func (s *NodeStatus) kick() {
	select {
	case s.trigger <- struct{}{}:
	default:
	}
}

// Run syncs on every node change, every SetConditions and every ReassertInterval until
// ctx ends. Errors are logged and retried on the next tick.
func (s *NodeStatus) Run(ctx context.Context) {
	ticker := s.opts.Clock.NewTicker(s.opts.ReassertInterval)
	defer ticker.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-s.trigger:
		case <-ticker.C():
		}
		if err := s.Sync(ctx); err != nil && ctx.Err() == nil {
			s.opts.Logger.Warn("node status sync failed; retrying", "node", s.opts.NodeName, "err", err)
		}
	}
}

// Sync compares the node with what evictiond wants and writes the difference.
func (s *NodeStatus) Sync(ctx context.Context) error {
	s.mu.Lock()
	desired, haveSet := s.desired, s.haveSet
	s.mu.Unlock()
	if !haveSet {
		return nil
	}
	s.syncMu.Lock()
	defer s.syncMu.Unlock()

	node, err := s.currentNode()
	if err != nil {
		return err
	}
	if !s.adopted {
		s.adopt(node)
	}

	var conditions []corev1.NodeCondition
	var events []nodeEvent
	if !s.opts.DisableConditions {
		conditions, events = s.conditionChanges(node, desired)
	}
	taints, taintsChanged := s.wantedTaints(node, desired)
	if len(conditions) == 0 && !taintsChanged {
		return nil
	}
	if s.opts.DryRun {
		summary := fmt.Sprintf("conditions=%v taints=%v", describeConditions(conditions), taints)
		if summary != s.lastDryRun {
			s.lastDryRun = summary
			s.opts.Logger.Info("would update node status", "node", s.opts.NodeName, "conditions", describeConditions(conditions), "taints", taints)
		}
		s.commitHeld(desired)
		return nil
	}

	if len(conditions) > 0 {
		if err := s.patchConditions(ctx, conditions); err != nil {
			return err
		}
		s.commitHeld(desired)
		for _, ev := range events {
			s.recorder.Event(NodeRef(s.opts.NodeName), ev.eventType, ev.reason, ev.message)
		}
	}
	if taintsChanged {
		if err := s.updateTaints(ctx, desired); err != nil {
			return err
		}
	}
	s.commitHeld(desired)
	return nil
}

// currentNode is the informer's node, unless the cache has not caught up with our own
// last write yet, in which case that write's answer is newer.
func (s *NodeStatus) currentNode() (*corev1.Node, error) {
	node, err := s.node.Get(s.opts.NodeName)
	if err != nil {
		return nil, fmt.Errorf("reading node %s from the cache: %w", s.opts.NodeName, err)
	}
	if s.lastWritten != nil && newerResourceVersion(s.lastWritten.ResourceVersion, node.ResourceVersion) {
		return s.lastWritten, nil
	}
	return node, nil
}

// adopt takes over True entries with evictiond's reason from an earlier run, so that
// they are cleared (once) if that pressure is not observed now.
func (s *NodeStatus) adopt(node *corev1.Node) {
	s.adopted = true
	for _, kind := range pressureKinds {
		c := findCondition(node, kind.condition)
		if c != nil && c.Reason == kind.trueReason && c.Status == corev1.ConditionTrue {
			s.held[kind.condition] = true
			s.opts.Logger.Info("adopted pressure condition left by an earlier run", "node", s.opts.NodeName, "condition", kind.condition)
		}
	}
}

type nodeEvent struct {
	eventType, reason, message string
}

func (s *NodeStatus) conditionChanges(node *corev1.Node, desired map[corev1.NodeConditionType]bool) ([]corev1.NodeCondition, []nodeEvent) {
	now := metav1.NewTime(s.opts.Clock.Now())
	var changes []corev1.NodeCondition
	var events []nodeEvent
	for _, kind := range pressureKinds {
		cur := findCondition(node, kind.condition)
		switch {
		case desired[kind.condition]:
			if cur != nil && cur.Status == corev1.ConditionTrue && cur.Reason == kind.trueReason {
				continue
			}
			transition := now
			if cur != nil && cur.Status == corev1.ConditionTrue {
				transition = cur.LastTransitionTime
			}
			changes = append(changes, corev1.NodeCondition{Type: kind.condition, Status: corev1.ConditionTrue,
				Reason: kind.trueReason, Message: kind.trueMessage, LastHeartbeatTime: now, LastTransitionTime: transition})
			if !s.held[kind.condition] {
				events = append(events, nodeEvent{corev1.EventTypeWarning, EventReasonPressureCondition,
					fmt.Sprintf("Node condition %s set True by evictiond", kind.condition)})
			} else {
				prev := "absent"
				if cur != nil {
					prev = fmt.Sprintf("%s/%s", cur.Status, cur.Reason)
				}
				s.opts.Logger.Info("re-asserting pressure condition another writer changed", "node", s.opts.NodeName,
					"condition", kind.condition, "found", prev)
			}
		case s.held[kind.condition]:
			// Released: write False once, and only over our own True entry.
			if cur == nil || cur.Reason != kind.trueReason || cur.Status != corev1.ConditionTrue {
				continue
			}
			changes = append(changes, corev1.NodeCondition{Type: kind.condition, Status: corev1.ConditionFalse,
				Reason: kind.falseReason, Message: kind.falseMsg, LastHeartbeatTime: now, LastTransitionTime: now})
			events = append(events, nodeEvent{corev1.EventTypeNormal, EventReasonPressureReleased,
				fmt.Sprintf("Node condition %s set False by evictiond: pressure and transition period over", kind.condition)})
		}
	}
	return changes, events
}

// commitHeld records which conditions evictiond holds True after a successful write.
func (s *NodeStatus) commitHeld(desired map[corev1.NodeConditionType]bool) {
	for _, kind := range pressureKinds {
		if desired[kind.condition] {
			s.held[kind.condition] = true
			continue
		}
		if !s.held[kind.condition] {
			continue
		}
		// Released: after a successful sync the False entry is written, or the entry
		// was not ours anymore; either way there is nothing left to release.
		delete(s.held, kind.condition)
	}
}

func (s *NodeStatus) patchConditions(ctx context.Context, conditions []corev1.NodeCondition) error {
	// A strategic merge patch merges conditions by type: only these entries change, and
	// no resourceVersion is needed, so a concurrent kubelet status update never makes it
	// fail with a conflict.
	patch, err := json.Marshal(map[string]any{"status": map[string]any{"conditions": conditions}})
	if err != nil {
		return fmt.Errorf("encoding condition patch: %w", err)
	}
	ctx, cancel := context.WithTimeout(ctx, s.opts.APITimeout)
	defer cancel()
	updated, err := s.client.CoreV1().Nodes().Patch(ctx, s.opts.NodeName, types.StrategicMergePatchType, patch, metav1.PatchOptions{}, "status")
	if err != nil {
		return fmt.Errorf("patching pressure conditions %v of node %s: %w", describeConditions(conditions), s.opts.NodeName, err)
	}
	s.rememberWrite(updated)
	s.opts.Logger.Info("updated node conditions", "node", s.opts.NodeName, "conditions", describeConditions(conditions))
	return nil
}

// wantedTaints returns the node's taints with evictiond's replaced by the wanted ones,
// and whether that differs from the node.
func (s *NodeStatus) wantedTaints(node *corev1.Node, desired map[corev1.NodeConditionType]bool) ([]corev1.Taint, bool) {
	var out, ours []corev1.Taint
	for _, t := range node.Spec.Taints {
		if strings.HasPrefix(t.Key, TaintKeyPrefix) {
			ours = append(ours, t)
			continue
		}
		out = append(out, t)
	}
	want := s.ownTaints(desired)
	sameTaints := len(ours) == len(want) && !slices.ContainsFunc(want, func(w corev1.Taint) bool {
		return !slices.ContainsFunc(ours, func(o corev1.Taint) bool { return o.Key == w.Key && o.Effect == w.Effect && o.Value == w.Value })
	})
	return append(out, want...), !sameTaints
}

func (s *NodeStatus) ownTaints(desired map[corev1.NodeConditionType]bool) []corev1.Taint {
	var want []corev1.Taint
	for _, kind := range pressureKinds {
		effect := s.opts.TaintEffects[kind.condition]
		if desired[kind.condition] && effect != "" {
			want = append(want, corev1.Taint{Key: kind.taintKey, Effect: effect})
		}
	}
	return want
}

// updateTaints rewrites evictiond's taints on a fresh copy of the node, guarded by its
// resourceVersion (taints have no merge key, so a patch replaces the whole list and
// must not race with another writer's taint change).
func (s *NodeStatus) updateTaints(ctx context.Context, desired map[corev1.NodeConditionType]bool) error {
	first := true
	return retry.RetryOnConflict(retry.DefaultBackoff, func() error {
		ctx, cancel := context.WithTimeout(ctx, s.opts.APITimeout)
		defer cancel()
		node, err := s.currentNode()
		if err != nil {
			return err
		}
		if !first {
			if node, err = s.client.CoreV1().Nodes().Get(ctx, s.opts.NodeName, metav1.GetOptions{}); err != nil {
				return fmt.Errorf("reading node %s: %w", s.opts.NodeName, err)
			}
		}
		first = false
		taints, changed := s.wantedTaints(node, desired)
		if !changed {
			return nil
		}
		if taints == nil {
			taints = []corev1.Taint{}
		}
		patch, err := json.Marshal(map[string]any{
			"metadata": map[string]any{"resourceVersion": node.ResourceVersion},
			"spec":     map[string]any{"taints": taints},
		})
		if err != nil {
			return fmt.Errorf("encoding taint patch: %w", err)
		}
		updated, err := s.client.CoreV1().Nodes().Patch(ctx, s.opts.NodeName, types.MergePatchType, patch, metav1.PatchOptions{})
		if err != nil {
			if apierrors.IsConflict(err) {
				return err
			}
			return fmt.Errorf("updating evictiond taints of node %s: %w", s.opts.NodeName, err)
		}
		s.rememberWrite(updated)
		s.opts.Logger.Info("updated evictiond taints", "node", s.opts.NodeName, "taints", s.ownTaints(desired))
		return nil
	})
}

func (s *NodeStatus) rememberWrite(after *corev1.Node) {
	s.lastWritten = after
}

// newerResourceVersion reports whether resourceVersion a is newer than b. The API calls
// them opaque, but every etcd3-backed apiserver issues increasing integers (the watch
// cache relies on it); anything unparsable counts as not newer, so the cache wins.
func newerResourceVersion(a, b string) bool {
	x, errA := strconv.ParseUint(a, 10, 64)
	y, errB := strconv.ParseUint(b, 10, 64)
	return errA == nil && errB == nil && x > y
}

func findCondition(node *corev1.Node, t corev1.NodeConditionType) *corev1.NodeCondition {
	for i := range node.Status.Conditions {
		if node.Status.Conditions[i].Type == t {
			return &node.Status.Conditions[i]
		}
	}
	return nil
}

func kindOf(t corev1.NodeConditionType) (pressureKind, bool) {
	for _, k := range pressureKinds {
		if k.condition == t {
			return k, true
		}
	}
	return pressureKind{}, false
}

func describeConditions(conds []corev1.NodeCondition) []string {
	out := make([]string, 0, len(conds))
	for _, c := range conds {
		out = append(out, fmt.Sprintf("%s=%s/%s", c.Type, c.Status, c.Reason))
	}
	return out
}
