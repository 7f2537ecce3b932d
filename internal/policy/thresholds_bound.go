package policy

import (
	"fmt"
	"strconv"
	"strings"

	"k8s.io/apimachinery/pkg/api/resource"
)

// Percent thresholds with an absolute floor or cap (kubernetes#54058): a
// percentage alone scales with the node, so memory.available<10% waits for
// 51 GiB free on a 512 GiB node and only 400 MiB on a 4 GiB one. A threshold
// may instead be the larger or the smaller of a percentage and a quantity:
//
//	memory.available: "max(5%, 500Mi)"   5%, but never below 500Mi
//	memory.available: "min(10%, 4Gi)"    10%, but never above 4Gi
//
// or, in the flag form, memory.available<max(5%,500Mi). Every kubelet value
// ("500Mi", "10%") keeps its meaning: the function form is new syntax, which
// the kubelet rejects, never a reinterpretation of old syntax.

// Bound combines a threshold's percentage and quantity.
type Bound string

const (
	// BoundMax: the larger of the two (the quantity is a floor).
	BoundMax Bound = "max"
	// BoundMin: the smaller of the two (the quantity is a cap).
	BoundMin Bound = "min"
)

// thresholdFormsRule is the rule a threshold value that parses as nothing breaks.
const thresholdFormsRule = "must be a quantity (500Mi) or a percentage (10%), or the larger or smaller of one of each: max(10%,2Gi), min(10%,2Gi)"

// boundForm splits "max(a, b)" or "min(a, b)" into its function and
// arguments; ok is false when val is not a function form.
func boundForm(val string) (Bound, []string, bool) {
	for _, b := range []Bound{BoundMax, BoundMin} {
		if inner, ok := strings.CutPrefix(val, string(b)+"("); ok {
			inner, closed := strings.CutSuffix(strings.TrimSpace(inner), ")")
			if !closed {
				return b, nil, true
			}
			return b, strings.Split(inner, ","), true
		}
	}
	return "", nil, false
}

// parseBoundThreshold parses the arguments of max(...) or min(...): one
// percentage and one quantity, each with the kubelet's rules.
func parseBoundThreshold(signal Signal, val string, b Bound, args []string) (*ThresholdValue, string, error) {
	usage := fmt.Sprintf("%s() takes one percentage and one quantity, like %s(10%%,2Gi)", b, b)
	if args == nil {
		return nil, "", fmt.Errorf("%s: the closing parenthesis is missing", usage)
	}
	if signal.IsPSI() {
		return nil, "", fmt.Errorf("a pressure stall threshold is a percentage of time stalled, like 40%%; %s() is for thresholds on an amount", b)
	}
	if len(args) != 2 {
		return nil, "", fmt.Errorf("%s: found %d arguments", usage, len(args))
	}
	out := &ThresholdValue{Bound: b}
	var havePct bool
	for _, a := range args {
		a = strings.TrimSpace(a)
		if _, _, nested := boundForm(a); nested {
			return nil, "", fmt.Errorf("%s: %q is not one (no nesting)", usage, a)
		}
		v, _, err := parseThresholdValue(signal, a)
		switch {
		case err != nil:
			return nil, "", fmt.Errorf("%s: %q: %v", usage, a, err)
		case v == nil:
			return nil, "", fmt.Errorf("%s: %q disables a signal on its own and means nothing inside %s()", usage, a, b)
		case strings.HasSuffix(a, "%"):
			if havePct {
				return nil, "", fmt.Errorf("%s: found two percentages", usage)
			}
			havePct = true
			out.Percentage = v.Percentage
		default:
			if out.Quantity != nil {
				return nil, "", fmt.Errorf("%s: found two quantities (%s() of two quantities is one of them: write it)", usage, b)
			}
			out.Quantity = v.Quantity
		}
	}
	return out, val, nil
}

// Crossover is the capacity at which a bounded value's two sides are equal:
// below it the quantity wins for max() (the percentage for min()), above it
// the other side. Zero for an unbounded value.
func (v ThresholdValue) Crossover() int64 {
	if v.Bound == "" || v.Percentage <= 0 {
		return 0
	}
	return int64(float64(v.Quantity.Value()) / float64(v.Percentage))
}

// Explain says, for a bounded value, which side wins at capacity and the
// resulting amount: "max(5%,500Mi) of 4Gi: 500Mi (the quantity: 5% is
// 204.8Mi)". For other values it is the resolved amount. Simulate and the
// validation of a threshold quote it.
func (v ThresholdValue) Explain(s Signal, raw string, capacity int64) string {
	got := approxValue(s, v.Resolve(capacity))
	if v.Bound == "" {
		return got
	}
	pct := int64(float64(capacity) * float64(v.Percentage))
	q := v.Quantity.Value()
	side, other := "the quantity", fmt.Sprintf("%g%% is %s", pctText(v.Percentage), approxValue(s, pct))
	if (v.Bound == BoundMax) == (pct > q) {
		side, other = fmt.Sprintf("the percentage, %g%%", pctText(v.Percentage)), fmt.Sprintf("the quantity is %s", approxValue(s, q))
	}
	return fmt.Sprintf("%s of %s: %s (%s; %s)", raw, approxValue(s, capacity), got, side, other)
}

// approxValue is FormatValue, with a byte amount that is no whole number of
// its unit (a percentage of capacity) in Mi, Gi or Ti to one decimal, as a
// person reads it ("204.8Mi", not "214748364").
func approxValue(s Signal, v int64) string {
	exact := FormatValue(s, v)
	if !s.InBytes() || v < 1<<20 || v%(1<<20) == 0 {
		return exact
	}
	f, unit := float64(v)/(1<<20), "Mi"
	for _, u := range []string{"Gi", "Ti"} {
		if f < 1024 {
			break
		}
		f, unit = f/1024, u
	}
	return strings.TrimSuffix(strconv.FormatFloat(f, 'f', 1, 64), ".0") + unit
}

// CrossoverText says where a bounded value changes sides, in words: "the
// 500Mi floor holds below 9.8Gi of capacity, 5% above".
func (v ThresholdValue) CrossoverText(s Signal) string {
	if v.Bound == "" {
		return ""
	}
	q, c := approxValue(s, v.Quantity.Value()), approxValue(s, v.Crossover())
	if v.Bound == BoundMax {
		return fmt.Sprintf("the %s floor holds below %s of capacity, %g%% above", q, c, pctText(v.Percentage))
	}
	return fmt.Sprintf("%g%% holds below %s of capacity, the %s cap above", pctText(v.Percentage), c, q)
}

// pctText is a stored fraction as the percentage the user wrote (float32
// rounding undone to 4 digits).
func pctText(p float32) float64 {
	v, _ := resource.ParseQuantity(fmt.Sprintf("%.4g", float64(p)*100))
	return v.AsApproximateFloat64()
}

// splitStatements splits a flag-form list on its commas, except those of a
// max(...) or min(...) value: memory.available<max(5%,500Mi),nodefs.available<10%
// is two statements. A function form is protected only up to its closing
// parenthesis, and only when that comes before the next operator, so an
// unclosed one cannot swallow the statements after it.
func splitStatements(s string) []string {
	var out []string
	start := 0
	for i := 0; i < len(s); i++ {
		switch s[i] {
		case '<', '>', '=':
			rest := s[i+1:]
			value := strings.TrimLeft(rest, " \t")
			if !strings.HasPrefix(value, string(BoundMax)+"(") && !strings.HasPrefix(value, string(BoundMin)+"(") {
				continue
			}
			closing, nextOp := strings.IndexByte(rest, ')'), strings.IndexAny(rest, "<>=")
			if closing >= 0 && (nextOp < 0 || closing < nextOp) {
				i += closing + 1
			}
		case ',':
			out = append(out, s[start:i])
			start = i + 1
		}
	}
	return append(out, s[start:])
}

// boundNotes explains each max()/min() threshold the user wrote: where it
// changes sides, and what it is on a small and a large node.
func boundNotes(ts []Threshold) []string {
	var out []string
	for _, t := range ts {
		if t.Value.Bound == "" || t.DerivedFrom != "" {
			continue
		}
		field := "evictionHard"
		if !t.Hard() {
			field = "evictionSoft"
		}
		var at []string
		for _, c := range []int64{4 << 30, 64 << 30, 512 << 30} {
			at = append(at, fmt.Sprintf("%s on %s", approxValue(t.Signal, t.Value.Resolve(c)), approxValue(t.Signal, c)))
		}
		out = append(out, fmt.Sprintf("%s[%s]: %q: %s (%s)", field, t.Signal, t.Raw, t.Value.CrossoverText(t.Signal), strings.Join(at, ", ")))
	}
	return out
}
