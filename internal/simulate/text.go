package simulate

import (
	"fmt"
	"io"
	"strings"
)

// WriteText renders a result for people: one block per step, saying what was
// met, what the node reports, what was reclaimed and who was evicted, and why.
func WriteText(w io.Writer, r *Result) {
	for _, s := range r.Steps {
		fmt.Fprintf(w, "t=%s\n", s.At)
		writeMemoryReclaimText(w, s.MemoryReclaim)
		writePodPressureText(w, s.SelfInflicted, s.Explained)
		writeLivelockText(w, s)
		if len(s.ThresholdsMet) == 0 {
			fmt.Fprintln(w, "  no threshold met")
		}
		for _, t := range s.ThresholdsMet {
			kind := "hard"
			if !t.Hard {
				kind = "soft (grace " + t.GracePeriod + ")"
				if !t.GraceSatisfied {
					kind += ", grace not yet elapsed"
				}
			}
			stale := ""
			if !t.FreshStats {
				stale = ", stats not newer than last pass"
			}
			fmt.Fprintf(w, "  threshold met: %s %s %s (%s) — %s: %s%s\n", t.Signal, t.Operator, t.Threshold, kind, valueWord(t.Operator), t.Available, stale)
			if t.Explain != "" {
				fmt.Fprintf(w, "    %s\n", t.Explain)
			}
		}
		if len(s.NodeConditions) > 0 {
			fmt.Fprintf(w, "  node conditions: %s\n", strings.Join(s.NodeConditions, ", "))
		}
		if s.StarvedSignal != nil {
			fmt.Fprintf(w, "  acting on %s (resource %s)\n", *s.StarvedSignal, *s.StarvedResource)
		}
		for _, rc := range s.NodeReclaim {
			fmt.Fprintf(w, "  node-level reclaim: %s freed %s\n", rc.Step, rc.Freed)
		}
		for _, e := range s.LocalStorage {
			fmt.Fprintf(w, "  EVICT %s (%s, grace %ds): %s\n", e.Pod, e.Signal, e.GracePeriodSeconds, e.Message)
		}
		if b := s.Brake; b != nil {
			if b.Fire {
				fmt.Fprintf(w, "  BRAKE: %s\n    %s\n", b.Reason, b.Action)
				switch {
				case b.Killed != "":
					fmt.Fprintf(w, "    frozen %s, killed on the node: %s\n", b.Frozen, b.Killed)
				case len(b.Thawed) > 0:
					fmt.Fprintf(w, "    frozen %s, thawed: %s\n", b.Frozen, strings.Join(b.Thawed, ", "))
				case b.Frozen != "":
					fmt.Fprintf(w, "    frozen %s, held until the eviction is answered or brake.maxFreeze\n", b.Frozen)
				}
			} else {
				fmt.Fprintf(w, "  no brake: %s\n", b.Reason)
			}
		}
		for _, e := range s.Escalated {
			fmt.Fprintf(w, "  ESCALATE %s (grace now %ds)\n    why: %s\n", e.Pod, e.GracePeriodSeconds, e.Reason)
		}
		for _, e := range s.Refused {
			fmt.Fprintf(w, "  eviction of %s refused (PodDisruptionBudget)\n", e.Pod)
		}
		if e := s.Eviction; e != nil {
			fmt.Fprintf(w, "  EVICT %s (grace %ds)\n    why: %s\n    message: %s\n", e.Pod, e.GracePeriodSeconds, e.Reason, strings.TrimSpace(e.Message))
		}
		for _, l := range s.Loops {
			fmt.Fprintf(w, "  EVICTION LOOP: %s, %d evictions; node held under pressure (NoSchedule) for %s, until t=%s\n    Event EvictionLoop: %s\n",
				l.Workload, l.Evictions, l.Backoff, l.Until, l.Event)
		}
		if s.Waiting != "" {
			fmt.Fprintf(w, "  no eviction: %s\n", s.Waiting)
		}
		for _, n := range s.Notes {
			fmt.Fprintf(w, "  note: %s\n", n)
		}
	}
}

func valueWord(op string) string {
	if op == ">" {
		return "stall"
	}
	return "available"
}
