// Package simulate runs evictiond's whole decision path over a scenario — a
// configuration, a node, pods and a timeline of observations — on a virtual
// clock, and reports every decision. The decisions are the daemon's own: the
// scenario's node is wired into internal/daemon (the loop, the evictor with
// its rate limits, cool-down and PDB ladder) with a fake API server. Its JSON output is a public interface,
// documented in docs/simulate.md; change it only by adding fields.
package simulate

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"math"
	"sort"
	"strconv"
	"strings"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	clocktesting "k8s.io/utils/clock/testing"
	kjson "sigs.k8s.io/json"
	"sigs.k8s.io/yaml"

	"github.com/evictiond/evictiond/internal/agent"
	"github.com/evictiond/evictiond/internal/daemon"
	"github.com/evictiond/evictiond/internal/eviction"
	"github.com/evictiond/evictiond/internal/policy"
)

// Scenario is the input document.
type Scenario struct {
	Config json.RawMessage `json:"config,omitempty"`
	Node   NodeSpec        `json:"node"`
	// Self is the UID of evictiond's own pod, never evicted.
	Self  string   `json:"self,omitempty"`
	Pods  []v1.Pod `json:"pods"`
	Steps []Step   `json:"steps"`
}

// NodeSpec names the node and its filesystem layout.
type NodeSpec struct {
	Name             string `json:"name"`
	DedicatedImageFs bool   `json:"dedicatedImageFs"`
	SplitContainerFs bool   `json:"splitContainerFs"`
}

// Step is one pass of the loop at a virtual time.
type Step struct {
	// At is the virtual time since the start ("0s", "1m30s").
	At Value `json:"at"`
	// Observations replace the previous readings of the signals they name;
	// signals not named keep their earlier reading and its time.
	Observations map[string]ObservationIn `json:"observations,omitempty"`
	// PodStats replace the previous usage of the pods they name, by UID.
	PodStats map[string]PodStatsIn `json:"podStats,omitempty"`
	// PodsGone are UIDs whose termination finished before this step.
	PodsGone []string `json:"podsGone,omitempty"`
	// PodsAdded are pods bound to the node before this step.
	PodsAdded []v1.Pod `json:"podsAdded,omitempty"`
	// Reclaimable is what each node-level reclaim step would free in this
	// step (containerGC, imageGC, podLogs), in the starved signal's unit.
	Reclaimable map[string]Value `json:"reclaimable,omitempty"`
	// EvictionRefused are UIDs whose eviction the API server refuses in this
	// step (a PodDisruptionBudget's 429): the next candidate is tried.
	EvictionRefused []string `json:"evictionRefused,omitempty"`
}

// ObservationIn is a signal reading. For PSI signals give Stall (a
// percentage) instead of Available and Capacity.
type ObservationIn struct {
	Available Value `json:"available,omitempty"`
	Capacity  Value `json:"capacity,omitempty"`
	Stall     Value `json:"stall,omitempty"`
	// Age is how old the reading is at this step (default 0s: read now).
	Age Value `json:"age,omitempty"`
}

// Value is a quantity, percentage or duration as the scenario writes it: a
// YAML string ("500Mi") or number (500, 2147483648), as the configuration
// accepts them. Anything else is kept as its JSON text, for the check that
// reads it to name.
type Value string

// UnmarshalJSON keeps a string as is and any other JSON value as its text.
func (v *Value) UnmarshalJSON(b []byte) error {
	var s string
	if json.Unmarshal(b, &s) != nil {
		s = string(b)
	}
	*v = Value(s)
	return nil
}

// PodStatsIn is a pod's usage.
type PodStatsIn struct {
	MemoryWorkingSet Value `json:"memoryWorkingSet,omitempty"`
	// MemorySwap is the pod's swap use (cgroup v2 memory.swap.current), what
	// swap.available ranks by with the working set.
	MemorySwap Value `json:"memorySwap,omitempty"`
	// MemoryFile is the pod's page cache: what reclaim before evict
	// (memoryReclaim) can take back.
	MemoryFile Value `json:"memoryFile,omitempty"`
	// MemoryPressure is the pod cgroup's memory.pressure and limit
	// (podPressure: a pod stalled against its own limit).
	MemoryPressure   *PodPressureIn              `json:"memoryPressure,omitempty"`
	Processes        *int64                      `json:"processes,omitempty"`
	Containers       map[string]ContainerStatsIn `json:"containers,omitempty"`
	Volumes          map[string]Value            `json:"volumes,omitempty"`
	VolumeInodes     map[string]int64            `json:"volumeInodes,omitempty"`
	EphemeralStorage Value                       `json:"ephemeralStorage,omitempty"`
}

// ContainerStatsIn is a container's usage.
type ContainerStatsIn struct {
	MemoryWorkingSet Value  `json:"memoryWorkingSet,omitempty"`
	Rootfs           Value  `json:"rootfs,omitempty"`
	Logs             Value  `json:"logs,omitempty"`
	RootfsInodes     *int64 `json:"rootfsInodes,omitempty"`
	LogsInodes       *int64 `json:"logsInodes,omitempty"`
}

// Result is the output document.
type Result struct {
	Steps []StepResult `json:"steps"`
}

// StepResult is every decision of one step.
type StepResult struct {
	At              string          `json:"at"`
	ThresholdsMet   []ThresholdMet  `json:"thresholdsMet"`
	NodeConditions  []string        `json:"nodeConditions"`
	StarvedResource *string         `json:"starvedResource"`
	StarvedSignal   *string         `json:"starvedSignal"`
	NodeReclaim     []ReclaimResult `json:"nodeReclaim"`
	// MemoryReclaim is reclaim before evict's run, when a memory signal was
	// within memoryReclaim.margin of its threshold.
	MemoryReclaim *MemoryReclaimResult `json:"memoryReclaim,omitempty"`
	// SelfInflicted are pods stalled against their own memory limits, and
	// Explained the PSI signals whose stall is theirs (not node pressure).
	SelfInflicted []SelfInflictedResult `json:"selfInflicted,omitempty"`
	Explained     map[string]string     `json:"explainedPressure,omitempty"`
	// Livelocked are pods livelocked at their memory limit (livelock), the
	// restart requested, or why none was.
	Livelocked       []LivelockResult       `json:"livelocked,omitempty"`
	LivelockRestart  *LivelockRestartResult `json:"livelockRestart,omitempty"`
	LivelockHeldBack string                 `json:"livelockHeldBack,omitempty"`
	Ranking          []string               `json:"ranking"`
	Excluded         []ExcludedResult       `json:"excluded,omitempty"`
	Eviction         *EvictionResult        `json:"eviction"`
	Brake            *BrakeResult           `json:"brake,omitempty"`
	// EvictionOutcome is the evictor's answer when a threshold eviction was
	// tried: evicted, deleted, dry_run, pdb_blocked, cooling_down,
	// rate_limited, ... (the evictiond_evictions_total result label).
	EvictionOutcome string           `json:"evictionOutcome,omitempty"`
	Refused         []EvictionResult `json:"refused,omitempty"`
	LocalStorage    []EvictionResult `json:"localStorageEvictions,omitempty"`
	Waiting         string           `json:"waiting,omitempty"`
	// Escalated are soft evictions in flight requested again with the hard
	// grace period (a hard threshold met meanwhile).
	Escalated []EvictionResult `json:"escalated,omitempty"`
	Pending   []string         `json:"pending,omitempty"`
	// Loops are the eviction loops this step's eviction is part of.
	Loops        []LoopResult      `json:"loops,omitempty"`
	Notes        []string          `json:"notes,omitempty"`
	Observations map[string]ObsOut `json:"observations,omitempty"`
}

// ThresholdMet is a met threshold with its numbers.
type ThresholdMet struct {
	Signal    string `json:"signal"`
	Hard      bool   `json:"hard"`
	Operator  string `json:"operator"`
	Threshold string `json:"threshold"`
	// ThresholdQuantity is the threshold resolved against capacity.
	ThresholdQuantity string `json:"thresholdQuantity"`
	Available         string `json:"available"`
	Capacity          string `json:"capacity"`
	MinReclaim        string `json:"minReclaim,omitempty"`
	GracePeriod       string `json:"gracePeriod,omitempty"`
	GraceSatisfied    bool   `json:"graceSatisfied"`
	FreshStats        bool   `json:"freshStats"`
	DerivedFrom       string `json:"derivedFrom,omitempty"`
	// Explain says, for a max()/min() threshold, which side won at this
	// capacity and the resulting amount.
	Explain string `json:"explain,omitempty"`
}

// ReclaimResult is one node-level reclaim step.
type ReclaimResult struct {
	Step  string `json:"step"`
	Freed string `json:"freed"`
}

// ExcludedResult is a pod that could not be evicted.
type ExcludedResult struct {
	Pod    string `json:"pod"`
	Reason string `json:"reason"`
}

// EvictionResult is a chosen victim.
type EvictionResult struct {
	Pod                string            `json:"pod"`
	Signal             string            `json:"signal"`
	GracePeriodSeconds int64             `json:"gracePeriodSeconds"`
	Message            string            `json:"message"`
	Reason             string            `json:"reason"`
	ExpectedReclaim    string            `json:"expectedReclaim,omitempty"`
	Annotations        map[string]string `json:"annotations,omitempty"`
}

// ObsOut is an observation as the step saw it.
type ObsOut struct {
	Available string `json:"available"`
	Capacity  string `json:"capacity"`
	Age       string `json:"age"`
}

// Epoch is the virtual clock's start.
var Epoch = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// Error is a problem with the scenario, naming where it is.
type Error struct {
	Field, Value, Rule string
}

func (e Error) Error() string { return fmt.Sprintf("%s: %q: %s", e.Field, e.Value, e.Rule) }

// Errors is every problem found in a scenario.
type Errors []error

func (es Errors) Error() string {
	lines := make([]string, len(es))
	for i, e := range es {
		lines[i] = e.Error()
	}
	return strings.Join(lines, "\n")
}

// Decode parses a scenario strictly.
func Decode(data []byte) (*Scenario, *policy.Config, error) {
	if e := policy.SingleDocumentError(data); e != nil {
		return nil, nil, Errors{*e}
	}
	js, err := yaml.YAMLToJSONStrict(data)
	if err != nil {
		var errs Errors
		for _, fe := range policy.YAMLError(data, err) {
			errs = append(errs, fe)
		}
		return nil, nil, errs
	}
	var sc Scenario
	strict, err := kjson.UnmarshalStrict(js, &sc, kjson.DisallowDuplicateFields, kjson.DisallowUnknownFields)
	if err != nil {
		return nil, nil, Errors{Error{"(document)", firstLine(err.Error()), "must match the scenario format (docs/simulate.md)"}}
	}
	var errs Errors
	for _, se := range strict {
		errs = append(errs, Error{"(document)", se.Error(), "not part of the scenario format (docs/simulate.md)"})
	}
	if len(errs) > 0 {
		return nil, nil, errs
	}
	for i := range sc.Pods {
		errs = append(errs, podQuantityErrors(fmt.Sprintf("pods[%d]", i), &sc.Pods[i])...)
	}
	for i, st := range sc.Steps {
		for j := range st.PodsAdded {
			errs = append(errs, podQuantityErrors(fmt.Sprintf("steps[%d].podsAdded[%d]", i, j), &st.PodsAdded[j])...)
		}
	}
	if len(errs) > 0 {
		return nil, nil, errs
	}
	cfgData := []byte(sc.Config)
	if len(cfgData) == 0 {
		cfgData = []byte("{}")
	}
	raw, ferrs := policy.Decode(cfgData, false)
	if ferrs != nil {
		for _, fe := range ferrs {
			fe.Field = "config." + fe.Field
			errs = append(errs, fe)
		}
		return nil, nil, errs
	}
	cfg, ferrs := policy.Compile(*raw)
	if ferrs != nil {
		for _, fe := range ferrs {
			fe.Field = "config." + fe.Field
			errs = append(errs, fe)
		}
		return nil, nil, errs
	}
	return &sc, cfg, nil
}

func firstLine(s string) string {
	s, _, _ = strings.Cut(s, "\n")
	return s
}

// Run plays the scenario through the daemon's own loop and evictor
// (internal/daemon) on a virtual clock, and returns every step's decisions.
func Run(sc *Scenario, cfg *policy.Config) (*Result, error) {
	steps, err := ParseSteps(sc)
	if err != nil {
		return nil, err
	}
	clk := clocktesting.NewFakeClock(Epoch)
	node := NewNode(sc, clk.Now)
	client, err := node.Clientset()
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	d, err := daemon.New(ctx, cfg, daemon.Deps{Client: client, Pods: node, Node: node,
		Recorder: discardEvents{}, Clock: clk, Owners: scenarioOwners{}},
		daemon.Options{NodeName: node.Name, SelfUID: types.UID(sc.Self), Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		cancel()
		return nil, err
	}
	defer func() { cancel(); d.Close() }()
	res := &Result{Steps: []StepResult{}}
	for i, st := range steps {
		// Run's order on the virtual clock: what the loop runs beside its
		// passes (the graceful watch's readings) until the step, then its pass.
		d.Agent.Advance(ctx, Epoch.Add(st.At))
		node.Apply(st.Input)
		rep := d.Agent.PassOnce(ctx, "simulate")
		// Ages are the step's: the pass may have waited on the virtual clock
		// (the brake's second reading) as it would on a node.
		sr := stepResult(string(sc.Steps[i].At), rep, cfg, Epoch.Add(st.At))
		sr.Loops = loopResults(rep.Loops, node.Name)
		res.Steps = append(res.Steps, sr)
	}
	d.Agent.Settle(ctx)
	return res, nil
}

// ParsedStep is a scenario step ready to apply at its virtual time.
type ParsedStep struct {
	At    time.Duration
	Input StepInput
}

// ParseSteps checks every step and converts it; the errors name the field,
// the value and the rule.
func ParseSteps(sc *Scenario) ([]ParsedStep, error) {
	var errs Errors
	var out []ParsedStep
	var last time.Duration = -1
	for i, step := range sc.Steps {
		field := fmt.Sprintf("steps[%d]", i)
		at, err := time.ParseDuration(string(step.At))
		if err != nil {
			errs = append(errs, Error{field + ".at", string(step.At), "must be a duration like 0s or 1m30s"})
			continue
		}
		if at < last {
			errs = append(errs, Error{field + ".at", string(step.At), "steps must be in time order"})
			continue
		}
		last = at
		now := Epoch.Add(at)
		in := StepInput{Gone: map[types.UID]bool{}, Observations: policy.Observations{}, PodStats: policy.PodStatsByUID{},
			Reclaimable: map[policy.ReclaimStep]int64{}, Refused: map[types.UID]bool{}}
		for _, uid := range step.PodsGone {
			in.Gone[types.UID(uid)] = true
		}
		for j := range step.PodsAdded {
			in.Added = append(in.Added, &step.PodsAdded[j])
		}
		for _, sig := range sortedKeys(step.Observations) {
			o, err := parseObservation(field+".observations["+sig+"]", policy.Signal(sig), step.Observations[sig], now)
			if err != nil {
				errs = append(errs, err)
				continue
			}
			in.Observations[policy.Signal(sig)] = o
		}
		for _, uid := range sortedKeys(step.PodStats) {
			ps, err := parsePodStats(field+".podStats["+uid+"]", step.PodStats[uid], now)
			if err != nil {
				errs = append(errs, err)
				continue
			}
			in.PodStats[types.UID(uid)] = ps
		}
		for _, name := range sortedKeys(step.Reclaimable) {
			f := field + ".reclaimable[" + name + "]"
			switch s := policy.ReclaimStep(name); s {
			case policy.ReclaimContainerGC, policy.ReclaimImageGC, policy.ReclaimPodLogs:
				v, err := parseQuantity(f, string(step.Reclaimable[name]))
				if err != nil {
					errs = append(errs, err)
					continue
				}
				in.Reclaimable[s] = v
			default:
				errs = append(errs, Error{f, name, "must be containerGC, imageGC or podLogs"})
			}
		}
		for _, uid := range step.EvictionRefused {
			in.Refused[types.UID(uid)] = true
		}
		out = append(out, ParsedStep{At: at, Input: in})
	}
	if len(errs) > 0 {
		return nil, errs
	}
	return out, nil
}

// BrakeResult is the brake's decision on a step's eviction.
type BrakeResult struct {
	Fire bool `json:"fire"`
	// Action says what the agent does: freeze the first candidate before
	// the request and kill it once accepted, or the graceful path.
	Action string `json:"action"`
	Reason string `json:"reason"`
	// Rate is how fast the signal falls, from this step's and earlier
	// steps' readings; TimeToExhaustion how long until it reaches zero.
	Rate             string `json:"rate,omitempty"`
	TimeToExhaustion string `json:"timeToExhaustion,omitempty"`
	EvictionPath     string `json:"evictionPath"`
	// Frozen and Killed name the pod the scenario's node froze before the
	// request and killed once it was accepted; Thawed the holds ended
	// without a kill (the request refused).
	Frozen string   `json:"frozen,omitempty"`
	Killed string   `json:"killed,omitempty"`
	Thawed []string `json:"thawed,omitempty"`
}

func brakeResult(d policy.BrakeDecision, first policy.Candidate) *BrakeResult {
	b := &BrakeResult{Fire: d.Fire, Reason: d.Reason, EvictionPath: d.EvictionPath.String() + " (" + d.PathSource + ")", Action: "graceful path"}
	if d.RateSpan > 0 {
		b.Rate = policy.FormatRate(d.Signal, d.Rate)
	}
	if d.TimeToExhaustion >= 0 {
		b.TimeToExhaustion = d.TimeToExhaustion.Round(time.Millisecond).String()
	}
	if d.Fire {
		b.Action = "freeze " + key(first.Pod) + " before the eviction request; kill it on the node once the API server accepts it, thaw it if refused"
	}
	return b
}

// stepResult is the public form of one pass's report (docs/simulate.md).
func stepResult(at string, rep agent.Report, cfg *policy.Config, now time.Time) StepResult {
	sr := StepResult{At: at, ThresholdsMet: []ThresholdMet{}, NodeConditions: []string{}, NodeReclaim: []ReclaimResult{}, Ranking: []string{},
		Observations: map[string]ObsOut{}, Pending: rep.Pending}
	if rep.Err != "" {
		sr.Notes = append(sr.Notes, "pass skipped: "+rep.Err)
		return sr
	}
	sr.MemoryReclaim = memoryReclaimResult(rep.MemoryReclaim)
	sr.SelfInflicted, sr.Explained = podPressureResult(rep.PodPressure)
	sr.Livelocked, sr.LivelockRestart, sr.LivelockHeldBack = livelockResult(rep.Livelock)
	a := rep.Assessment
	for _, m := range a.Met {
		sr.ThresholdsMet = append(sr.ThresholdsMet, thresholdMet(m))
	}
	for _, c := range a.Conditions {
		sr.NodeConditions = append(sr.NodeConditions, string(c))
	}
	for s, o := range rep.Observed.Observations {
		sr.Observations[string(s)] = ObsOut{Available: policy.FormatValue(s, o.Available), Capacity: policy.FormatValue(s, capacityValue(s, o)), Age: now.Sub(o.Time).String()}
	}
	if len(a.LocalStorage) > 0 {
		for _, ev := range rep.Evictions {
			if ev.Victim != nil {
				sr.LocalStorage = append(sr.LocalStorage, evictionResult(*ev.Victim))
			} else {
				sr.Notes = append(sr.Notes, "local-storage eviction not done: "+outcomeNote(ev, cfg))
			}
		}
		if rep.Deferred > 0 {
			sr.Notes = append(sr.Notes, fmt.Sprintf("%d more local-storage violations wait for the next pass (eviction.rateLimits.maxPerPass %d)", rep.Deferred, cfg.RateLimits.MaxPerPass))
		}
		sr.Notes = append(sr.Notes, "local-storage limit evictions take the pass; threshold evictions wait for the next one")
		return sr
	}
	if a.Starved == nil {
		return sr
	}
	s := a.Starved.Threshold.Signal
	sig, resName := string(s), string(s.Resource())
	sr.StarvedSignal, sr.StarvedResource = &sig, &resName
	if r := rep.Reclaim; r != nil {
		for _, st := range r.Steps {
			sr.NodeReclaim = append(sr.NodeReclaim, ReclaimResult{Step: string(st.Step), Freed: policy.FormatValue(r.Signal, max(st.Freed, 0))})
		}
		if r.Sufficient {
			sr.Notes = append(sr.Notes, "node-level reclaim brought every threshold past its minimum reclaim: no eviction")
			return sr
		}
	}
	sel := rep.Selection
	if sel == nil || len(sel.Candidates) == 0 {
		if b := rep.Brake; b != nil && b.Frozen != "" {
			// The brake took a victim already evicted: overdue past its grace
			// period (agent/escalate.go), or pending while the ramp outran it.
			action := "freeze and kill the pending victim: the ramp would outrun its termination"
			if sel == nil {
				action = "freeze and kill the overdue victim; the next victim is chosen on the next pass if the signal is still crossed"
			}
			sr.Brake = &BrakeResult{Fire: true, Reason: b.Reason, Action: action, Frozen: b.Frozen, Killed: b.Killed}
		}
	}
	if sel == nil {
		return sr
	}
	for _, ev := range rep.Escalations {
		if ev.Victim != nil {
			sr.Escalated = append(sr.Escalated, evictionResult(*ev.Victim))
		} else {
			sr.Notes = append(sr.Notes, "escalation not done: "+outcomeNote(ev, cfg))
		}
	}
	sr.Waiting = sel.Waiting
	for _, r := range sel.Ranking {
		sr.Ranking = append(sr.Ranking, key(r.Pod))
	}
	for _, x := range sel.Excluded {
		sr.Excluded = append(sr.Excluded, ExcludedResult{Pod: key(x.Pod), Reason: x.Reason})
	}
	if sel.Waiting == "" && len(sel.Candidates) == 0 {
		sr.Notes = append(sr.Notes, "unable to evict any pods from the node: no eligible pod")
	}
	if rep.Brake != nil && len(sel.Candidates) > 0 {
		sr.Brake = brakeResult(rep.Brake.BrakeDecision, sel.Candidates[0])
		sr.Brake.Frozen, sr.Brake.Killed, sr.Brake.Thawed = rep.Brake.Frozen, rep.Brake.Killed, rep.Brake.Thawed
	}
	if len(rep.Evictions) == 0 {
		return sr
	}
	ev := rep.Evictions[0]
	sr.EvictionOutcome = string(ev.Outcome)
	refused := 0
	for _, at := range ev.Attempts {
		if at.Outcome != eviction.OutcomePDBBlocked {
			continue
		}
		refused++
		for _, c := range sel.Candidates {
			if c.Pod.UID == at.UID {
				sr.Refused = append(sr.Refused, evictionResult(c))
			}
		}
	}
	switch {
	case ev.Victim != nil:
		er := evictionResult(*ev.Victim)
		if ev.Outcome == eviction.OutcomeDeleted {
			er.Reason = fmt.Sprintf("deleted directly: %d candidates refused by PodDisruptionBudgets under hard pressure (eviction.pdbEscalation.delete); %s", refused, er.Reason)
		}
		sr.Eviction = &er
	case ev.Outcome == eviction.OutcomePDBBlocked && a.Starved.Threshold.Hard():
		sr.Notes = append(sr.Notes, fmt.Sprintf("%d candidates refused by PodDisruptionBudgets under hard pressure; escalation stops (eviction.pdbEscalation.delete is false)", refused))
	case ev.Outcome == eviction.OutcomePDBBlocked:
		sr.Notes = append(sr.Notes, fmt.Sprintf("every candidate (%d) refused by PodDisruptionBudgets under soft pressure; nothing is forced", refused))
	default:
		sr.Notes = append(sr.Notes, "no eviction: "+outcomeNote(ev, cfg))
	}
	return sr
}

// outcomeNote says why the evictor took no pod down.
func outcomeNote(ev eviction.Result, cfg *policy.Config) string {
	switch ev.Outcome {
	case eviction.OutcomeCoolingDown:
		return fmt.Sprintf("cooling down after the last eviction (eviction.rateLimits.cooldown %v)", cfg.RateLimits.Cooldown)
	case eviction.OutcomeRateLimited:
		return fmt.Sprintf("token bucket empty (eviction.rateLimits.perMinute %v, burst %d)", cfg.RateLimits.PerMinute, cfg.RateLimits.Burst)
	}
	if ev.Err != nil {
		return fmt.Sprintf("%s: %v", ev.Outcome, ev.Err)
	}
	return string(ev.Outcome)
}

func capacityValue(s policy.Signal, o policy.Observation) int64 {
	if s.IsPSI() {
		return 0 // renders as 100.00%
	}
	return o.Capacity
}

func thresholdMet(m policy.ThresholdStatus) ThresholdMet {
	t := m.Threshold
	out := ThresholdMet{
		Signal: string(t.Signal), Hard: t.Hard(), Operator: "<", Threshold: t.Raw,
		ThresholdQuantity: policy.FormatValue(t.Signal, m.Quantity),
		Available:         policy.FormatValue(t.Signal, m.Observation.Available),
		Capacity:          policy.FormatValue(t.Signal, capacityValue(t.Signal, m.Observation)),
		GraceSatisfied:    m.GraceSatisfied, FreshStats: m.Fresh, DerivedFrom: string(t.DerivedFrom),
	}
	if t.Value.Bound != "" {
		out.Explain = t.Value.Explain(t.Signal, t.Raw, m.Observation.Capacity)
	}
	if t.Signal.IsPSI() {
		out.Operator = ">"
		out.ThresholdQuantity = t.Raw
		out.Capacity = "100.00%"
	}
	if m.MinReclaim > 0 {
		if t.Signal.IsPSI() {
			out.MinReclaim = fmt.Sprintf("%.2f%%", float64(m.MinReclaim)/100)
		} else {
			out.MinReclaim = policy.FormatValue(t.Signal, m.MinReclaim)
		}
	}
	if !t.Hard() {
		out.GracePeriod = t.GracePeriod.String()
	}
	return out
}

func evictionResult(c policy.Candidate) EvictionResult {
	er := EvictionResult{Pod: key(c.Pod), Signal: string(c.Signal), GracePeriodSeconds: c.GracePeriodSeconds,
		Message: c.Message, Reason: c.Reason, Annotations: c.Annotations}
	if c.ExpectedReclaim > 0 {
		er.ExpectedReclaim = policy.FormatValue(c.Signal, c.ExpectedReclaim)
		if !c.Signal.Valid() { // local-storage pseudo-signals are bytes
			er.ExpectedReclaim = resource.NewQuantity(c.ExpectedReclaim, resource.BinarySI).String()
		}
	}
	return er
}

func key(p *v1.Pod) string { return p.Namespace + "/" + p.Name }

func copyObs(o policy.Observations) policy.Observations {
	out := make(policy.Observations, len(o))
	for k, v := range o {
		out[k] = v
	}
	return out
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

func parseQuantity(field, v string) (int64, error) {
	q, err := policy.ParseQuantity(v)
	if err != nil {
		return 0, Error{field, v, policy.QuantityRule(err, "must be a quantity like 500Mi")}
	}
	if !policy.FitsInt64(q) {
		return 0, Error{field, v, "must be at most 8Ei"}
	}
	if q.Sign() < 0 {
		return 0, Error{field, v, "must not be negative"}
	}
	return q.Value(), nil
}

func parseObservation(field string, s policy.Signal, in ObservationIn, now time.Time) (policy.Observation, error) {
	if !s.Valid() {
		return policy.Observation{}, Error{field, string(s), "unsupported eviction signal"}
	}
	o := policy.Observation{Time: now}
	if in.Age != "" {
		age, err := time.ParseDuration(string(in.Age))
		if err != nil || age < 0 {
			return o, Error{field + ".age", string(in.Age), "must be a non-negative duration"}
		}
		o.Time = now.Add(-age)
	}
	if s.IsPSI() {
		pct, err := strconv.ParseFloat(strings.TrimSuffix(string(in.Stall), "%"), 64)
		// NaN passes every comparison below as false: it must be refused by name,
		// or it becomes a stall of -9.2e16 % and evicts.
		if err != nil || math.IsNaN(pct) || pct < 0 || pct > 100 {
			return o, Error{field + ".stall", string(in.Stall), "a pressure stall signal takes stall: a percentage from 0 to 100"}
		}
		o.Capacity = policy.PSIScale
		o.Available = policy.PSIScale - int64(pct*100+0.5)
		return o, nil
	}
	var err error
	if o.Available, err = parseQuantity(field+".available", string(in.Available)); err != nil {
		return o, err
	}
	if o.Capacity, err = parseQuantity(field+".capacity", string(in.Capacity)); err != nil {
		return o, err
	}
	if o.Available > o.Capacity {
		return o, Error{field + ".available", string(in.Available), "must not exceed capacity " + string(in.Capacity)}
	}
	return o, nil
}

func optQuantity(field string, v Value) (*int64, error) {
	if v == "" {
		return nil, nil
	}
	n, err := parseQuantity(field, string(v))
	if err != nil {
		return nil, err
	}
	return &n, nil
}

func parsePodStats(field string, in PodStatsIn, now time.Time) (policy.PodStats, error) {
	ps := policy.PodStats{Time: now, Processes: in.Processes, Containers: map[string]policy.ContainerStats{}, Volumes: map[string]policy.VolumeStats{}}
	var err error
	if ps.MemoryWorkingSet, err = optQuantity(field+".memoryWorkingSet", in.MemoryWorkingSet); err != nil {
		return ps, err
	}
	if ps.MemorySwap, err = optQuantity(field+".memorySwap", in.MemorySwap); err != nil {
		return ps, err
	}
	if ps.MemoryFile, err = optQuantity(field+".memoryFile", in.MemoryFile); err != nil {
		return ps, err
	}
	if ps.MemoryPressure, err = parsePodPressure(field+".memoryPressure", in.MemoryPressure); err != nil {
		return ps, err
	}
	if ps.EphemeralStorageBytes, err = optQuantity(field+".ephemeralStorage", in.EphemeralStorage); err != nil {
		return ps, err
	}
	for _, name := range sortedKeys(in.Containers) {
		c := in.Containers[name]
		cf := field + ".containers[" + name + "]"
		var cs policy.ContainerStats
		if cs.MemoryWorkingSet, err = optQuantity(cf+".memoryWorkingSet", c.MemoryWorkingSet); err != nil {
			return ps, err
		}
		if cs.RootfsBytes, err = optQuantity(cf+".rootfs", c.Rootfs); err != nil {
			return ps, err
		}
		if cs.LogsBytes, err = optQuantity(cf+".logs", c.Logs); err != nil {
			return ps, err
		}
		cs.RootfsInodes, cs.LogsInodes = c.RootfsInodes, c.LogsInodes
		ps.Containers[name] = cs
	}
	for _, name := range sortedKeys(in.Volumes) {
		n, err := optQuantity(field+".volumes["+name+"]", in.Volumes[name])
		if err != nil {
			return ps, err
		}
		ps.Volumes[name] = policy.VolumeStats{UsedBytes: n}
	}
	for name, inodes := range in.VolumeInodes {
		vs := ps.Volumes[name]
		n := inodes
		vs.InodesUsed = &n
		ps.Volumes[name] = vs
	}
	return ps, nil
}

// podQuantityErrors refuses a pod's quantities the engine cannot compute with:
// exact arithmetic on "1E1000000000" builds the power in big.Int and never
// returns (policy.FitsInt64), and a negative request is no request.
func podQuantityErrors(field string, pod *v1.Pod) Errors {
	var errs Errors
	check := func(f string, q resource.Quantity) {
		switch {
		case !policy.FitsInt64(q):
			errs = append(errs, Error{f, q.String(), "must be at most 8Ei"})
		case q.Sign() < 0:
			errs = append(errs, Error{f, q.String(), "must not be negative"})
		}
	}
	checkList := func(f string, l v1.ResourceList) {
		names := make([]string, 0, len(l))
		for name := range l {
			names = append(names, string(name))
		}
		sort.Strings(names)
		for _, name := range names {
			check(f+"["+name+"]", l[v1.ResourceName(name)])
		}
	}
	containers := func(f string, cs []v1.Container) {
		for i, c := range cs {
			cf := fmt.Sprintf("%s[%d].resources", f, i)
			checkList(cf+".requests", c.Resources.Requests)
			checkList(cf+".limits", c.Resources.Limits)
		}
	}
	containers(field+".spec.containers", pod.Spec.Containers)
	containers(field+".spec.initContainers", pod.Spec.InitContainers)
	checkList(field+".spec.overhead", pod.Spec.Overhead)
	for i, vol := range pod.Spec.Volumes {
		if vol.EmptyDir != nil && vol.EmptyDir.SizeLimit != nil {
			check(fmt.Sprintf("%s.spec.volumes[%d].emptyDir.sizeLimit", field, i), *vol.EmptyDir.SizeLimit)
		}
	}
	return errs
}

// discardEvents is the simulation's Event recorder: the steps' output says what
// the loop decided, and the Events are not kept (as with client-go's
// FakeRecorder{} before, without linking tools/record into the binary).
type discardEvents struct{}

func (discardEvents) Event(runtime.Object, string, string, string)          {}
func (discardEvents) Eventf(runtime.Object, string, string, string, ...any) {}
func (discardEvents) AnnotatedEventf(runtime.Object, map[string]string, string, string, string, ...any) {
}
