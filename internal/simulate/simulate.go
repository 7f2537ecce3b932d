// Package simulate runs evictiond's whole decision path over a scenario — a
// configuration, a node, pods and a timeline of observations — on a virtual
// clock, and reports every decision. Its JSON output is a public interface,
// documented in docs/simulate.md; change it only by adding fields.
package simulate

import (
	"encoding/json"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/types"
	kjson "sigs.k8s.io/json"
	"sigs.k8s.io/yaml"

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
	At string `json:"at"`
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
	Reclaimable map[string]string `json:"reclaimable,omitempty"`
	// EvictionRefused are UIDs whose eviction the API server refuses in this
	// step (a PodDisruptionBudget's 429): the next candidate is tried.
	EvictionRefused []string `json:"evictionRefused,omitempty"`
}

// ObservationIn is a signal reading. For PSI signals give Stall (a
// percentage) instead of Available and Capacity.
type ObservationIn struct {
	Available string `json:"available,omitempty"`
	Capacity  string `json:"capacity,omitempty"`
	Stall     string `json:"stall,omitempty"`
	// Age is how old the reading is at this step (default 0s: read now).
	Age string `json:"age,omitempty"`
}

// PodStatsIn is a pod's usage.
type PodStatsIn struct {
	MemoryWorkingSet string                      `json:"memoryWorkingSet,omitempty"`
	Processes        *int64                      `json:"processes,omitempty"`
	Containers       map[string]ContainerStatsIn `json:"containers,omitempty"`
	Volumes          map[string]string           `json:"volumes,omitempty"`
	VolumeInodes     map[string]int64            `json:"volumeInodes,omitempty"`
	EphemeralStorage string                      `json:"ephemeralStorage,omitempty"`
}

// ContainerStatsIn is a container's usage.
type ContainerStatsIn struct {
	MemoryWorkingSet string `json:"memoryWorkingSet,omitempty"`
	Rootfs           string `json:"rootfs,omitempty"`
	Logs             string `json:"logs,omitempty"`
	RootfsInodes     *int64 `json:"rootfsInodes,omitempty"`
	LogsInodes       *int64 `json:"logsInodes,omitempty"`
}

// Result is the output document.
type Result struct {
	Steps []StepResult `json:"steps"`
}

// StepResult is every decision of one step.
type StepResult struct {
	At              string            `json:"at"`
	ThresholdsMet   []ThresholdMet    `json:"thresholdsMet"`
	NodeConditions  []string          `json:"nodeConditions"`
	StarvedResource *string           `json:"starvedResource"`
	StarvedSignal   *string           `json:"starvedSignal"`
	NodeReclaim     []ReclaimResult   `json:"nodeReclaim"`
	Ranking         []string          `json:"ranking"`
	Excluded        []ExcludedResult  `json:"excluded,omitempty"`
	Eviction        *EvictionResult   `json:"eviction"`
	Refused         []EvictionResult  `json:"refused,omitempty"`
	LocalStorage    []EvictionResult  `json:"localStorageEvictions,omitempty"`
	Waiting         string            `json:"waiting,omitempty"`
	Pending         []string          `json:"pending,omitempty"`
	Notes           []string          `json:"notes,omitempty"`
	Observations    map[string]ObsOut `json:"observations,omitempty"`
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

type virtualClock struct{ now time.Time }

func (c *virtualClock) Now() time.Time { return c.now }

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
	js, err := yaml.YAMLToJSONStrict(data)
	if err != nil {
		return nil, nil, Errors{Error{"(document)", policy.YAMLErrorText(err), "must be valid YAML without duplicate keys"}}
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

// Run plays the scenario and returns every step's decisions.
func Run(sc *Scenario, cfg *policy.Config) (*Result, error) {
	clock := &virtualClock{now: Epoch}
	engine := policy.NewEngine(cfg, clock, types.UID(sc.Self))
	layout := policy.FilesystemLayout{DedicatedImageFs: sc.Node.DedicatedImageFs, SplitContainerFs: sc.Node.SplitContainerFs}

	pods := make([]*v1.Pod, 0, len(sc.Pods))
	for i := range sc.Pods {
		pods = append(pods, &sc.Pods[i])
	}
	obs := policy.Observations{}
	stats := policy.PodStatsByUID{}
	res := &Result{Steps: []StepResult{}}
	var errs Errors
	var last time.Duration = -1

	for i, step := range sc.Steps {
		field := fmt.Sprintf("steps[%d]", i)
		at, err := time.ParseDuration(step.At)
		if err != nil {
			errs = append(errs, Error{field + ".at", step.At, "must be a duration like 0s or 1m30s"})
			continue
		}
		if at < last {
			errs = append(errs, Error{field + ".at", step.At, "steps must be in time order"})
			continue
		}
		last = at
		clock.now = Epoch.Add(at)
		now := clock.now

		gone := map[string]bool{}
		for _, uid := range step.PodsGone {
			gone[uid] = true
		}
		kept := pods[:0]
		for _, p := range pods {
			if !gone[string(p.UID)] {
				kept = append(kept, p)
			} else {
				delete(stats, p.UID)
			}
		}
		pods = kept
		for j := range step.PodsAdded {
			pods = append(pods, &step.PodsAdded[j])
		}
		for _, sig := range sortedKeys(step.Observations) {
			o, err := parseObservation(field+".observations["+sig+"]", policy.Signal(sig), step.Observations[sig], now)
			if err != nil {
				errs = append(errs, err)
				continue
			}
			obs[policy.Signal(sig)] = o
		}
		for _, uid := range sortedKeys(step.PodStats) {
			ps, err := parsePodStats(field+".podStats["+uid+"]", step.PodStats[uid], now)
			if err != nil {
				errs = append(errs, err)
				continue
			}
			stats[types.UID(uid)] = ps
		}
		if len(errs) > 0 {
			continue
		}

		in := policy.Input{Observations: copyObs(obs), Pods: pods, Stats: stats, Layout: layout}
		a := engine.Assess(in)
		sr := StepResult{At: step.At, ThresholdsMet: []ThresholdMet{}, NodeConditions: []string{}, NodeReclaim: []ReclaimResult{}, Ranking: []string{}}
		for _, m := range a.Met {
			sr.ThresholdsMet = append(sr.ThresholdsMet, thresholdMet(m))
		}
		for _, c := range a.Conditions {
			sr.NodeConditions = append(sr.NodeConditions, string(c))
		}
		sr.Observations = map[string]ObsOut{}
		for s, o := range obs {
			sr.Observations[string(s)] = ObsOut{Available: policy.FormatValue(s, o.Available), Capacity: policy.FormatValue(s, capacityValue(s, o)), Age: now.Sub(o.Time).String()}
		}

		refused := map[string]bool{}
		for _, uid := range step.EvictionRefused {
			refused[uid] = true
		}

		if len(a.LocalStorage) > 0 {
			for i, c := range a.LocalStorage {
				if i >= cfg.RateLimits.MaxPerPass {
					sr.Notes = append(sr.Notes, fmt.Sprintf("%d more local-storage violations wait for the next pass (eviction.rateLimits.maxPerPass %d)", len(a.LocalStorage)-i, cfg.RateLimits.MaxPerPass))
					break
				}
				sr.LocalStorage = append(sr.LocalStorage, evictionResult(c))
				engine.Evicted(c)
			}
			sr.Notes = append(sr.Notes, "local-storage limit evictions take the pass; threshold evictions wait for the next one")
		} else if a.Starved != nil {
			s := a.Starved.Threshold.Signal
			sig, resName := string(s), string(s.Resource())
			sr.StarvedSignal, sr.StarvedResource = &sig, &resName
			fresh := in.Observations
			if a.NodeReclaim != nil {
				fresh, sr.NodeReclaim, err = reclaim(a.NodeReclaim, step.Reclaimable, obs, layout, now, field)
				if err != nil {
					errs = append(errs, err)
					continue
				}
				if engine.ReclaimSufficient(fresh, layout) {
					sr.Notes = append(sr.Notes, "node-level reclaim brought every threshold past its minimum reclaim: no eviction")
					res.Steps = append(res.Steps, finish(sr, engine))
					continue
				}
			}
			sel := engine.Select(a, fresh, cfg.Escalation.MaxCandidates+len(refused))
			sr.Waiting = sel.Waiting
			for _, r := range sel.Ranking {
				sr.Ranking = append(sr.Ranking, key(r.Pod))
			}
			for _, x := range sel.Excluded {
				sr.Excluded = append(sr.Excluded, ExcludedResult{Pod: key(x.Pod), Reason: x.Reason})
			}
			tried := 0
			for _, c := range sel.Candidates {
				if !refused[string(c.Pod.UID)] {
					er := evictionResult(c)
					sr.Eviction = &er
					engine.Evicted(c)
					break
				}
				sr.Refused = append(sr.Refused, evictionResult(c))
				tried++
				// Escalate after maxCandidates refusals, or sooner when fewer pods are eligible.
				if a.Starved.Threshold.Hard() && (tried >= cfg.Escalation.MaxCandidates || tried == len(sel.Candidates)) {
					if cfg.Escalation.Delete {
						er := evictionResult(sel.Candidates[0])
						er.Reason = fmt.Sprintf("deleted directly: %d candidates refused by PodDisruptionBudgets under hard pressure (eviction.pdbEscalation.delete); %s", tried, er.Reason)
						sr.Eviction = &er
						engine.Evicted(sel.Candidates[0])
					} else {
						sr.Notes = append(sr.Notes, fmt.Sprintf("%d candidates refused by PodDisruptionBudgets under hard pressure; escalation stops (eviction.pdbEscalation.delete is false)", tried))
					}
					break
				}
			}
			if sr.Eviction == nil && sel.Waiting == "" && len(sel.Candidates) == 0 {
				sr.Notes = append(sr.Notes, "unable to evict any pods from the node: no eligible pod")
			}
			if sr.Eviction == nil && !a.Starved.Threshold.Hard() && len(sel.Candidates) > 0 && tried == len(sel.Candidates) {
				sr.Notes = append(sr.Notes, fmt.Sprintf("every candidate (%d) refused by PodDisruptionBudgets under soft pressure; nothing is forced", tried))
			}
		}
		res.Steps = append(res.Steps, finish(sr, engine))
	}
	if len(errs) > 0 {
		return nil, errs
	}
	return res, nil
}

func finish(sr StepResult, e *policy.Engine) StepResult {
	sr.Pending = e.Pending()
	return sr
}

// reclaim applies the step's reclaimable amounts in the plan's order until the
// need is met, and returns the observations after it: every byte (or inode)
// signal on the starved signal's filesystem gains what was freed.
func reclaim(plan *policy.NodeReclaim, reclaimable map[string]string, obs policy.Observations, layout policy.FilesystemLayout, now time.Time, field string) (policy.Observations, []ReclaimResult, error) {
	var freed int64
	out := []ReclaimResult{}
	for _, step := range plan.Steps {
		var amount int64
		if v, ok := reclaimable[string(step)]; ok {
			q, err := resource.ParseQuantity(v)
			if err != nil || !policy.FitsInt64(q) || q.Sign() < 0 {
				return nil, nil, Error{field + ".reclaimable[" + string(step) + "]", v, "must be a non-negative quantity"}
			}
			amount = q.Value()
		}
		out = append(out, ReclaimResult{Step: string(step), Freed: policy.FormatValue(plan.Signal, amount)})
		freed += amount
		if freed >= plan.Need {
			break
		}
	}
	for _, s := range sameFilesystem(plan.Signal, layout) {
		if o, ok := obs[s]; ok {
			o.Available += freed
			if o.Available > o.Capacity {
				o.Available = o.Capacity
			}
			o.Time = now
			obs[s] = o
		}
	}
	return copyObs(obs), out, nil
}

// sameFilesystem lists the signals of the same unit that measure the same
// filesystem as s under layout.
func sameFilesystem(s policy.Signal, layout policy.FilesystemLayout) []policy.Signal {
	inodes := s.Resource() == policy.ResourceInodes
	pick := func(bytes, in policy.Signal) policy.Signal {
		if inodes {
			return in
		}
		return bytes
	}
	node := pick(policy.SignalNodeFsAvailable, policy.SignalNodeFsInodesFree)
	image := pick(policy.SignalImageFsAvailable, policy.SignalImageFsInodesFree)
	container := pick(policy.SignalContainerFsAvailable, policy.SignalContainerFsInodesFree)
	switch {
	case !layout.DedicatedImageFs:
		return []policy.Signal{node, image, container}
	case layout.SplitContainerFs:
		if s == image {
			return []policy.Signal{image}
		}
		return []policy.Signal{node, container}
	default:
		if s == node {
			return []policy.Signal{node}
		}
		return []policy.Signal{image, container}
	}
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
	q, err := resource.ParseQuantity(v)
	if err != nil {
		return 0, Error{field, v, "must be a quantity like 500Mi"}
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
		age, err := time.ParseDuration(in.Age)
		if err != nil || age < 0 {
			return o, Error{field + ".age", in.Age, "must be a non-negative duration"}
		}
		o.Time = now.Add(-age)
	}
	if s.IsPSI() {
		pct, err := strconv.ParseFloat(strings.TrimSuffix(in.Stall, "%"), 64)
		if err != nil || pct < 0 || pct > 100 {
			return o, Error{field + ".stall", in.Stall, "a pressure stall signal takes stall: a percentage from 0 to 100"}
		}
		o.Capacity = policy.PSIScale
		o.Available = policy.PSIScale - int64(pct*100+0.5)
		return o, nil
	}
	var err error
	if o.Available, err = parseQuantity(field+".available", in.Available); err != nil {
		return o, err
	}
	if o.Capacity, err = parseQuantity(field+".capacity", in.Capacity); err != nil {
		return o, err
	}
	if o.Available > o.Capacity {
		return o, Error{field + ".available", in.Available, "must not exceed capacity " + in.Capacity}
	}
	return o, nil
}

func optQuantity(field, v string) (*int64, error) {
	if v == "" {
		return nil, nil
	}
	n, err := parseQuantity(field, v)
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
