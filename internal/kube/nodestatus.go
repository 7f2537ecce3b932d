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
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/clock"

	"github.com/evictiond/evictiond/internal/policy"
)

// ConditionsMode says which node conditions evictiond publishes (config
// nodeStatus.conditions). See docs/operations.md for what the kubelet and the node
// lifecycle controller do in each mode.
type ConditionsMode string

const (
	// ConditionsOwn publishes evictiond's own condition types (EvictiondMemoryPressure,
	// ...), which nothing else writes: one write per pressure transition, no fight with
	// the kubelet. The standard conditions are left to the kubelet. The default.
	ConditionsOwn ConditionsMode = "own"
	// ConditionsStandard writes the standard MemoryPressure/DiskPressure/PIDPressure
	// entries (reason Evictiond...) and re-asserts them after each kubelet status update
	// that flips them back: the node lifecycle controller's standard taints follow, and
	// flap with every such rewrite.
	ConditionsStandard ConditionsMode = "standard"
	// ConditionsBoth publishes both; the standard entries fight as in ConditionsStandard.
	ConditionsBoth ConditionsMode = "both"
	// ConditionsNone publishes no condition; evictiond's taints alone.
	ConditionsNone ConditionsMode = "none"
)

// ConditionsModes lists the valid modes, the default first.
var ConditionsModes = []ConditionsMode{ConditionsOwn, ConditionsStandard, ConditionsBoth, ConditionsNone}

func (m ConditionsMode) standard() bool { return m == ConditionsStandard || m == ConditionsBoth }
func (m ConditionsMode) own() bool      { return m == ConditionsOwn || m == ConditionsBoth }

// NodeStatusOptions configures a NodeStatus. Zero values take the documented defaults.
type NodeStatusOptions struct {
	// NodeName is this node.
	NodeName string
	// Conditions says which condition types are published. Default ConditionsOwn.
	Conditions ConditionsMode
	// TaintEffects is the effect of evictiond's taint per pressure condition; a condition
	// missing from the map gets the default, and the effect "" (explicitly set) disables
	// that taint. Every default is NoSchedule:
	//   - DiskPressure, PIDPressure: the kubelet's admission refuses every non-critical
	//     pod under these conditions, so keeping all new pods off is exact.
	//   - MemoryPressure: the standard node.kubernetes.io/memory-pressure:NoSchedule
	//     taint the node lifecycle controller derives from the standard condition keeps
	//     off every pod without a toleration for it (only the optional
	//     PodTolerationRestriction admission plugin gives Burstable and Guaranteed pods
	//     one), and evictiond's taint must protect at least as much: it is the scheduling
	//     protection that never lapses, whatever the kubelet writes to MemoryPressure.
	TaintEffects map[corev1.NodeConditionType]corev1.TaintEffect
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
		corev1.NodeMemoryPressure: corev1.TaintEffectNoSchedule,
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
	if o.Conditions == "" {
		o.Conditions = ConditionsOwn
	}
	if o.ReassertInterval <= 0 {
		o.ReassertInterval = policy.DefaultReassertInterval
	}
	if o.APITimeout <= 0 {
		o.APITimeout = DefaultAPITimeout
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
	if !slices.Contains(ConditionsModes, o.Conditions) {
		return fmt.Errorf("node status: Conditions: value %q: must be one of %v", o.Conditions, ConditionsModes)
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
//   - each published condition type (see ConditionsMode) is True while the loop reports
//     that pressure (the policy includes the transition period): evictiond's own types
//     are written once per transition; a standard entry carries reason
//     Evictiond<X>Pressure and is re-asserted when another writer (the kubelet) flips it;
//   - a True entry evictiond wrote (own type, or standard type with its reason) that is
//     not wanted anymore (pressure over, or a type this mode does not publish) is set
//     False once with reason EvictiondNo<X>Pressure; no other entry is ever touched;
//   - taints with the evictiond.io/ prefix are exactly the configured ones for the
//     current pressures; no other taint is touched;
//   - so the first sync reconciles whatever an earlier run (or an earlier design: the
//     standard entries, PreferNoSchedule taints) left behind.
type NodeStatus struct {
	client   Interface
	node     nodeGetter
	recorder EventRecorder
	opts     NodeStatusOptions
	trigger  chan struct{}

	mu      sync.Mutex
	desired map[corev1.NodeConditionType]bool
	causes  map[corev1.NodeConditionType][]string
	haveSet bool

	syncMu      sync.Mutex
	adopted     bool
	held        map[corev1.NodeConditionType]bool // condition types evictiond holds True
	lastWritten *corev1.Node                      // the node as our last write returned it
	lastDryRun  string
}

type nodeGetter interface {
	Get(name string) (*corev1.Node, error)
}

// NewNodeStatus builds a NodeStatus reading this node from informers (which it also
// watches for other writers' changes; call before informers.Start).
func NewNodeStatus(client Interface, informers *NodeInformers, recorder EventRecorder, opts NodeStatusOptions) (*NodeStatus, error) {
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
// transition period included) and, for those whose thresholds are met now, the signals
// that met them: the condition's message names them (MemoryPressure for swap.available
// says so). Nothing is written before the first call, so start-up never clears state
// on a guess.
func (s *NodeStatus) SetConditions(conditions []corev1.NodeConditionType, causes map[corev1.NodeConditionType][]string) {
	desired := map[corev1.NodeConditionType]bool{}
	for _, c := range conditions {
		desired[c] = true
	}
	s.mu.Lock()
	s.desired, s.causes, s.haveSet = desired, causes, true
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
	s.syncMu.Lock() // Reconfigure may swap the options meanwhile
	ticker := s.opts.Clock.NewTicker(s.opts.ReassertInterval)
	log, node := s.opts.Logger, s.opts.NodeName
	s.syncMu.Unlock()
	defer ticker.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-s.trigger:
		case <-ticker.C():
		}
		if err := s.Sync(ctx); err != nil && ctx.Err() == nil {
			log.Warn("node status sync failed; retrying", "node", node, "err", err)
		}
	}
}

// Sync compares the node with what evictiond wants and writes the difference: at most
// one taint update and one condition patch (status and spec are separate endpoints).
func (s *NodeStatus) Sync(ctx context.Context) error {
	s.mu.Lock()
	desired, causes, haveSet := s.desired, s.causes, s.haveSet
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

	conditions, events := s.conditionChanges(node, desired, causes)
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

	// The taint first: it is the scheduling protection, and under new pressure every
	// millisecond without it is a window for the scheduler.
	if taintsChanged {
		if err := s.updateTaints(ctx, desired); err != nil {
			return err
		}
	}
	if len(conditions) > 0 {
		if err := s.patchConditions(ctx, conditions); err != nil {
			return err
		}
		for _, ev := range events {
			s.recorder.Event(NodeRef(s.opts.NodeName), ev.eventType, ev.reason, ev.message)
		}
	}
	s.commitHeld(desired)
	return nil
}

// ShownPressure lists the pressures the node shows as evictiond's (a True entry of its
// own condition type or a standard one with its reason, or its taint): at start, what
// an earlier run left. The caller must have synced the node cache.
func (s *NodeStatus) ShownPressure() []corev1.NodeConditionType {
	node, err := s.node.Get(s.opts.NodeName)
	if err != nil {
		return nil
	}
	var out []corev1.NodeConditionType
	for _, kind := range pressureKinds {
		shown := slices.ContainsFunc(node.Spec.Taints, func(t corev1.Taint) bool { return t.Key == kind.taintKey })
		for _, t := range []corev1.NodeConditionType{kind.condition, kind.own} {
			shown = shown || oursTrue(kind, t, findCondition(node, t))
		}
		if shown {
			out = append(out, kind.condition)
		}
	}
	return out
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

// adopt records the True entries an earlier run left (so that re-asserting them is not
// reported as new pressure); conditionChanges releases those not wanted now.
func (s *NodeStatus) adopt(node *corev1.Node) {
	s.adopted = true
	for _, kind := range pressureKinds {
		for _, t := range []corev1.NodeConditionType{kind.condition, kind.own} {
			if oursTrue(kind, t, findCondition(node, t)) {
				s.held[t] = true
				s.opts.Logger.Info("adopted pressure condition left by an earlier run", "node", s.opts.NodeName, "condition", t)
			}
		}
	}
}

// oursTrue reports whether entry c of type t is True and evictiond's: any True entry of
// its own types, a standard entry only with evictiond's reason.
func oursTrue(kind pressureKind, t corev1.NodeConditionType, c *corev1.NodeCondition) bool {
	return c != nil && c.Status == corev1.ConditionTrue && (t == kind.own || c.Reason == kind.trueReason)
}

// publishes reports whether condition type t of kind is published in this mode.
func (s *NodeStatus) publishes(kind pressureKind, t corev1.NodeConditionType) bool {
	if t == kind.own {
		return s.opts.Conditions.own()
	}
	return s.opts.Conditions.standard()
}

type nodeEvent struct {
	eventType, reason, message string
}

// pressureMessage is a True condition's message: the kind's, with the signals met now.
// With none (the transition period) the message the condition has is kept.
func pressureMessage(kind pressureKind, signals []string, cur *corev1.NodeCondition, ours bool) string {
	switch {
	case len(signals) > 0:
		return kind.trueMessage + " (" + strings.Join(signals, ", ") + ")"
	case ours:
		return cur.Message
	}
	return kind.trueMessage
}

func (s *NodeStatus) conditionChanges(node *corev1.Node, desired map[corev1.NodeConditionType]bool, causes map[corev1.NodeConditionType][]string) ([]corev1.NodeCondition, []nodeEvent) {
	now := metav1.NewTime(s.opts.Clock.Now())
	var changes []corev1.NodeCondition
	var events []nodeEvent
	for _, kind := range pressureKinds {
		var set, released []string
		for _, t := range []corev1.NodeConditionType{kind.condition, kind.own} {
			cur := findCondition(node, t)
			switch {
			case desired[kind.condition] && s.publishes(kind, t):
				ours := oursTrue(kind, t, cur)
				msg := pressureMessage(kind, causes[kind.condition], cur, ours)
				if ours && cur.Message == msg {
					continue
				}
				transition := now
				if cur != nil && cur.Status == corev1.ConditionTrue {
					transition = cur.LastTransitionTime
				}
				changes = append(changes, corev1.NodeCondition{Type: t, Status: corev1.ConditionTrue,
					Reason: kind.trueReason, Message: msg, LastHeartbeatTime: now, LastTransitionTime: transition})
				if ours {
					continue // the signals changed during the episode: a new message, no new pressure
				}
				if !s.held[t] {
					set = append(set, string(t))
					continue
				}
				prev := "absent"
				if cur != nil {
					prev = fmt.Sprintf("%s/%s", cur.Status, cur.Reason)
				}
				s.opts.Logger.Info("re-asserting pressure condition another writer changed", "node", s.opts.NodeName,
					"condition", t, "found", prev)
			case oursTrue(kind, t, cur):
				// Pressure over, or a type this mode does not publish (left by an earlier
				// run or design): False once, and only over our own True entry.
				changes = append(changes, corev1.NodeCondition{Type: t, Status: corev1.ConditionFalse,
					Reason: kind.falseReason, Message: kind.falseMsg, LastHeartbeatTime: now, LastTransitionTime: now})
				released = append(released, string(t))
			}
		}
		if len(set) > 0 {
			because := ""
			if sigs := causes[kind.condition]; len(sigs) > 0 {
				because = ": " + strings.Join(sigs, ", ")
			}
			events = append(events, nodeEvent{corev1.EventTypeWarning, EventReasonPressureCondition,
				fmt.Sprintf("Node condition %s set True by evictiond%s", strings.Join(set, ", "), because)})
		}
		if len(released) > 0 {
			events = append(events, nodeEvent{corev1.EventTypeNormal, EventReasonPressureReleased,
				fmt.Sprintf("Node condition %s set False by evictiond: pressure and transition period over", strings.Join(released, ", "))})
		}
	}
	return changes, events
}

// commitHeld records which condition types evictiond holds True after a successful sync.
func (s *NodeStatus) commitHeld(desired map[corev1.NodeConditionType]bool) {
	for _, kind := range pressureKinds {
		for _, t := range []corev1.NodeConditionType{kind.condition, kind.own} {
			if desired[kind.condition] && s.publishes(kind, t) {
				s.held[t] = true
			} else {
				delete(s.held, t)
			}
		}
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
