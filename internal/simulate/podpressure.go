package simulate

import (
	"fmt"
	"io"
	"math"
	"sort"
	"strconv"
	"strings"

	"github.com/evictiond/evictiond/internal/agent"
	"github.com/evictiond/evictiond/internal/policy"
)

// PodPressureIn is a pod cgroup's memory.pressure (stalls as percentages,
// like a PSI observation's) and its memory usage and limit.
type PodPressureIn struct {
	Some  Value `json:"some,omitempty"`
	Full  Value `json:"full,omitempty"`
	Usage Value `json:"usage,omitempty"`
	Limit Value `json:"limit,omitempty"`
	// OOMKills is memory.events oom_kill (default 0); the livelock check
	// (livelock) needs it unchanged over its window.
	OOMKills *int64 `json:"oomKills,omitempty"`
}

// LivelockResult is a pod found livelocked at its memory limit, and the
// restart requested (livelock.restart).
type LivelockResult struct {
	Pod    string `json:"pod"`
	Reason string `json:"reason"`
	// New: first reported at this step (the MemoryLivelock Event).
	New bool `json:"new"`
}

// LivelockRestartResult is the restart of a livelocked pod.
type LivelockRestartResult struct {
	Pod     string `json:"pod"`
	Action  string `json:"action"`
	Outcome string `json:"outcome"`
	Err     string `json:"error,omitempty"`
}

// SelfInflictedResult is a pod found stalled against its own memory limit.
type SelfInflictedResult struct {
	Pod    string `json:"pod"`
	Reason string `json:"reason"`
}

// parsePodPressure reads a pod's memoryPressure; the avg60 and avg300
// windows take the avg10 given (a scenario's step holds one reading).
func parsePodPressure(field string, in *PodPressureIn) (*policy.PodMemoryPressure, error) {
	if in == nil {
		return nil, nil
	}
	stall := func(f string, v Value) (int64, error) {
		if v == "" {
			return 0, nil
		}
		pct, err := strconv.ParseFloat(strings.TrimSuffix(string(v), "%"), 64)
		if err != nil || math.IsNaN(pct) || pct < 0 || pct > 100 {
			return 0, Error{f, string(v), "a percentage of time stalled from 0 to 100"}
		}
		return int64(pct*100 + 0.5), nil
	}
	some, err := stall(field+".some", in.Some)
	if err != nil {
		return nil, err
	}
	full, err := stall(field+".full", in.Full)
	if err != nil {
		return nil, err
	}
	out := &policy.PodMemoryPressure{Some: [3]int64{some, some, some}, Full: [3]int64{full, full, full}}
	if in.OOMKills != nil {
		if *in.OOMKills < 0 {
			return nil, Error{field + ".oomKills", strconv.FormatInt(*in.OOMKills, 10), "a count of OOM kills, 0 or more"}
		}
		out.OOMKills = *in.OOMKills
	}
	if in.Usage != "" {
		if out.Usage, err = parseQuantity(field+".usage", string(in.Usage)); err != nil {
			return nil, err
		}
	}
	if in.Limit != "" {
		if out.Limit, err = parseQuantity(field+".limit", string(in.Limit)); err != nil {
			return nil, err
		}
	}
	return out, nil
}

func podPressureResult(pa *policy.PodPressureAssessment) ([]SelfInflictedResult, map[string]string) {
	if pa == nil {
		return nil, nil
	}
	var pods []SelfInflictedResult
	for _, s := range pa.Pods {
		pods = append(pods, SelfInflictedResult{Pod: key(s.Pod), Reason: s.Reason})
	}
	explained := map[string]string{}
	for sig, why := range pa.Explained {
		explained[string(sig)] = why
	}
	return pods, explained
}

func writePodPressureText(w io.Writer, pods []SelfInflictedResult, explained map[string]string) {
	for _, p := range pods {
		fmt.Fprintf(w, "  pod stalled against its own limit (reported): %s: %s\n", p.Pod, p.Reason)
	}
	sigs := make([]string, 0, len(explained))
	for s := range explained {
		sigs = append(sigs, s)
	}
	sort.Strings(sigs)
	for _, s := range sigs {
		fmt.Fprintf(w, "    not node pressure: %s\n", explained[s])
	}
}

func livelockResult(r *agent.LivelockReport) ([]LivelockResult, *LivelockRestartResult, string) {
	if r == nil {
		return nil, nil, ""
	}
	var found []LivelockResult
	for _, l := range r.Found {
		found = append(found, LivelockResult{Pod: key(l.Pod), Reason: l.Reason, New: l.New})
	}
	var restart *LivelockRestartResult
	if x := r.Restart; x != nil {
		restart = &LivelockRestartResult{Pod: x.Pod, Action: x.Action, Outcome: x.Outcome, Err: x.Err}
	}
	return found, restart, r.HeldBack
}

func writeLivelockText(w io.Writer, s StepResult) {
	for _, l := range s.Livelocked {
		fmt.Fprintf(w, "  pod livelocked at its memory limit (reported): %s: %s\n", l.Pod, l.Reason)
	}
	if r := s.LivelockRestart; r != nil {
		fmt.Fprintf(w, "  RESTART %s (livelock.restart.action %s): %s", r.Pod, r.Action, r.Outcome)
		if r.Err != "" {
			fmt.Fprintf(w, " (%s)", r.Err)
		}
		fmt.Fprintln(w)
	}
	if s.LivelockHeldBack != "" {
		fmt.Fprintf(w, "    not restarted: %s\n", s.LivelockHeldBack)
	}
}
