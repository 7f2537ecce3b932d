package policy

import (
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/api/resource"
)

// ThresholdValue is a threshold or minimum reclaim: a quantity, or a
// percentage of the signal's capacity, or (thresholds only) the larger or
// smaller of a percentage and a quantity (Bound; thresholds_bound.go).
type ThresholdValue struct {
	Quantity   *resource.Quantity
	Percentage float32
	// Bound, when set, combines Percentage and Quantity: max(10%,2Gi) is
	// never below 2Gi, min(10%,2Gi) never above it.
	Bound Bound
}

// Resolve returns the value in the signal's unit against capacity, as the
// kubelet's GetThresholdQuantity does.
func (v ThresholdValue) Resolve(capacity int64) int64 {
	pct := int64(float64(capacity) * float64(v.Percentage))
	switch {
	case v.Bound == BoundMax:
		return max(pct, v.Quantity.Value())
	case v.Bound == BoundMin:
		return min(pct, v.Quantity.Value())
	case v.Quantity != nil:
		return v.Quantity.Value()
	}
	return pct
}

// IsQuantity: the value is a plain quantity (not a percentage, not bounded).
func (v ThresholdValue) IsQuantity() bool { return v.Quantity != nil && v.Bound == "" }

// Threshold is one compiled eviction threshold.
type Threshold struct {
	Signal Signal
	Value  ThresholdValue
	// GracePeriod is zero for hard thresholds.
	GracePeriod time.Duration
	MinReclaim  *ThresholdValue
	// Raw is the value as the user wrote it ("500Mi", "10%", or for PSI the
	// stall percentage "40%").
	Raw string
	// DerivedFrom names the signal a derived threshold was copied from
	// (allocatableMemory.available from memory.available, containerfs.* from
	// nodefs.* or imagefs.*).
	DerivedFrom Signal
}

// Hard reports whether the threshold is hard (no grace period), the
// kubelet's isHardEvictionThreshold.
func (t Threshold) Hard() bool { return t.GracePeriod == 0 }

// id is a stable key for per-threshold state (the kubelet keys by a struct
// holding pointers; evictiond keys by signal and kind).
func (t Threshold) id() string {
	if t.Hard() {
		return string(t.Signal) + "/hard"
	}
	return string(t.Signal) + "/soft"
}

// quantity is the threshold resolved against capacity.
func (t Threshold) quantity(capacity int64) int64 { return t.Value.Resolve(capacity) }

// minReclaim is the minimum reclaim resolved against capacity (0 if none).
func (t Threshold) minReclaim(capacity int64) int64 {
	if t.MinReclaim == nil {
		return 0
	}
	return t.MinReclaim.Resolve(capacity)
}

// DefaultEvictionHard are the kubelet's Linux defaults (defaults_linux.go).
var DefaultEvictionHard = map[string]string{
	"memory.available":   "100Mi",
	"nodefs.available":   "10%",
	"nodefs.inodesFree":  "5%",
	"imagefs.available":  "15%",
	"imagefs.inodesFree": "5%",
}

// parseThresholdValue parses one threshold statement's value with the
// kubelet's rules (parseThresholdStatement). It returns nil, nil for "0%" and
// "100%", which disable the signal. For PSI signals the value is a stall
// percentage and is turned into PSIScale headroom.
func parseThresholdValue(signal Signal, val string) (*ThresholdValue, string, error) {
	val = strings.TrimSpace(val)
	if val == "" {
		return nil, "", fmt.Errorf("must not be empty")
	}
	if b, args, ok := boundForm(val); ok {
		return parseBoundThreshold(signal, val, b, args)
	}
	if strings.HasSuffix(val, "%") {
		p, err := strconv.ParseFloat(strings.TrimSuffix(val, "%"), 32)
		if err != nil || math.IsNaN(p) {
			return nil, "", fmt.Errorf("%s", thresholdFormsRule)
		}
		if p == 0 || p == 100 {
			// 0% and 100% disable the signal. The kubelet matches the exact
			// strings only, so "100.0%" there is a threshold at capacity that
			// is always met and evicts every pod; the same number means the
			// same thing here.
			return nil, "", nil
		}
		if p < 0 {
			return nil, "", fmt.Errorf("eviction percentage threshold must be >= 0%%")
		}
		if p > 100 {
			return nil, "", fmt.Errorf("eviction percentage threshold must be <= 100%%")
		}
		if signal.IsPSI() {
			// Stall above p% <=> headroom below PSIScale - p% (in hundredths
			// of a percent, the kernel's resolution), kept exact: as a float32
			// fraction the boundary was 0.01% off for about half of all values.
			return &ThresholdValue{Quantity: psiQuantity(PSIScale - psiHundredths(p))}, val, nil
		}
		return &ThresholdValue{Percentage: float32(p / 100)}, val, nil
	}
	if signal.IsPSI() {
		return nil, "", fmt.Errorf("a pressure stall threshold is a percentage of time stalled, like 40%%")
	}
	q, err := ParseQuantity(val)
	if err != nil {
		return nil, "", fmt.Errorf("%s", QuantityRule(err, thresholdFormsRule))
	}
	if q.Sign() <= 0 {
		return nil, "", fmt.Errorf("eviction threshold must be positive")
	}
	if tooLarge(q) {
		return nil, "", fmt.Errorf("eviction threshold must be at most 8Ei")
	}
	return &ThresholdValue{Quantity: &q}, val, nil
}

// psiHundredths is a stall percentage in PSIScale units (hundredths of a percent).
func psiHundredths(pct float64) int64 { return int64(math.Round(pct * PSIScale / 100)) }

func psiQuantity(v int64) *resource.Quantity { return resource.NewQuantity(v, resource.DecimalSI) }

// parseMinReclaim parses a minimum reclaim value with the kubelet's rules.
func parseMinReclaim(signal Signal, val string) (*ThresholdValue, error) {
	val = strings.TrimSpace(val)
	if strings.HasSuffix(val, "%") {
		p, err := strconv.ParseFloat(strings.TrimSuffix(val, "%"), 32)
		if err != nil || math.IsNaN(p) {
			return nil, fmt.Errorf("must be a quantity (500Mi) or a percentage (10%%)")
		}
		if p <= 0 {
			return nil, fmt.Errorf("eviction percentage minimum reclaim must be positive")
		}
		if p > 100 {
			return nil, fmt.Errorf("eviction percentage minimum reclaim must be <= 100%%")
		}
		if signal.IsPSI() {
			return &ThresholdValue{Quantity: psiQuantity(psiHundredths(p))}, nil
		}
		return &ThresholdValue{Percentage: float32(p / 100)}, nil
	}
	if signal.IsPSI() {
		return nil, fmt.Errorf("a pressure stall minimum reclaim is a percentage of time stalled, like 5%%")
	}
	q, err := ParseQuantity(val)
	if err != nil {
		return nil, fmt.Errorf("%s", QuantityRule(err, "must be a quantity (500Mi) or a percentage (10%)"))
	}
	if q.Sign() < 0 {
		return nil, fmt.Errorf("negative eviction minimum reclaim")
	}
	if tooLarge(q) {
		return nil, fmt.Errorf("eviction minimum reclaim must be at most 8Ei")
	}
	return &ThresholdValue{Quantity: &q}, nil
}

// FitsInt64 reports whether q fits the int64 the engine computes in. It uses
// the float approximation: exact arithmetic on a quantity with a huge
// exponent ("1E10000000000") builds the power in big.Int and never returns,
// so every user-supplied quantity is checked with this before any other use.
func FitsInt64(q resource.Quantity) bool {
	f := q.AsApproximateFloat64()
	return !math.IsNaN(f) && !math.IsInf(f, 0) && f < math.MaxInt64 && f > math.MinInt64
}

func tooLarge(q resource.Quantity) bool { return !FitsInt64(q) }

// ParseFlagForm parses the kubelet's flag form of a signal map:
// "memory.available<500Mi,nodefs.available<10%" for thresholds (sep "<", and
// ">" for PSI signals) or "memory.available=1m30s" for grace periods and
// minimum reclaim (sep "="). A signal may appear only once. Errors name the
// statement, its value and the rule.
func ParseFlagForm(s string, thresholds bool) (map[string]string, []FieldError) {
	out := map[string]string{}
	var errs []FieldError
	s = strings.TrimSpace(s)
	if s == "" {
		return out, nil
	}
	for _, stmt := range splitStatements(s) {
		stmt = strings.TrimSpace(stmt)
		if stmt == "" {
			continue
		}
		var signal, val string
		var ok bool
		if thresholds {
			i := strings.IndexAny(stmt, "<>")
			if i < 0 {
				errs = append(errs, FieldError{Value: stmt, Rule: `a statement is <signal><<value>, like memory.available<500Mi`})
				continue
			}
			signal, val = strings.TrimSpace(stmt[:i]), strings.TrimSpace(stmt[i+1:])
			op := stmt[i]
			sig := Signal(signal)
			if sig.Valid() {
				switch {
				case sig.IsPSI() && op != '>':
					errs = append(errs, FieldError{Key: signal, Value: stmt, Rule: `a pressure stall threshold uses ">", like ` + signal + `>40%`})
					continue
				case !sig.IsPSI() && op != '<':
					errs = append(errs, FieldError{Key: signal, Value: stmt, Rule: `only "<" is supported for ` + signal})
					continue
				}
			}
			ok = true
		} else {
			signal, val, ok = strings.Cut(stmt, "=")
			signal, val = strings.TrimSpace(signal), strings.TrimSpace(val)
			if !ok {
				errs = append(errs, FieldError{Value: stmt, Rule: `a statement is <signal>=<value>, like memory.available=1m30s`})
				continue
			}
		}
		if !signalNameShape(signal) {
			errs = append(errs, FieldError{Key: signal, Value: stmt, Rule: `a statement starts with a signal name of letters, digits and dots, like memory.available`})
			continue
		}
		if _, dup := out[signal]; dup {
			errs = append(errs, FieldError{Key: signal, Value: stmt, Rule: "duplicate signal: each signal may appear once"})
			continue
		}
		out[signal] = val
	}
	return out, errs
}

// signalNameShape reports whether name could be a signal name: non-empty,
// letters, digits, dots, dashes and underscores. Whether it is a supported
// signal is decided later, with the list of those in the error; this keeps a
// name like ")" or "" from reaching the map at all.
func signalNameShape(name string) bool {
	if name == "" {
		return false
	}
	for _, r := range name {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '.' || r == '-' || r == '_') {
			return false
		}
	}
	return true
}

// sortThresholds orders thresholds for stable output: by signal registry
// order, hard before soft.
func sortThresholds(ts []Threshold) {
	order := map[Signal]int{}
	for i, s := range Signals() {
		order[s] = i
	}
	sort.SliceStable(ts, func(i, j int) bool {
		if order[ts[i].Signal] != order[ts[j].Signal] {
			return order[ts[i].Signal] < order[ts[j].Signal]
		}
		return ts[i].Hard() && !ts[j].Hard()
	})
}
