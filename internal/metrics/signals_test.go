package metrics

import (
	"strings"
	"testing"

	dto "github.com/prometheus/client_model/go"

	"github.com/evictiond/evictiond/internal/policy"
)

// series maps "family{signal,kind}" to the value of every series of the
// families of signals and thresholds (threshold_met aside: it is unitless).
func series(t *testing.T, m *Metrics) map[string]float64 {
	t.Helper()
	families, err := m.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, f := range families {
		name := f.GetName()
		if !strings.HasPrefix(name, "evictiond_signal_") && !strings.HasPrefix(name, "evictiond_threshold") || name == "evictiond_threshold_met" {
			continue
		}
		for _, s := range f.Metric {
			out[name+"{"+labels(s)+"}"] = s.GetGauge().GetValue()
		}
	}
	return out
}

// labels are a series' signal, then its kind if any.
func labels(s *dto.Metric) string {
	var signal, kind string
	for _, p := range s.Label {
		switch p.GetName() {
		case "signal":
			signal = p.GetValue()
		case "kind":
			kind = "," + p.GetValue()
		}
	}
	return signal + kind
}

// Every signal of policy's registry is exported in exactly one reading family and one
// threshold family, named by its unit's suffix; a capacity family too, except PSI's
// (a stalled share has no capacity). Nothing else is exported: no family of mixed units.
func TestEverySignalLandsInOneFamilyOfItsUnit(t *testing.T) {
	m := New()
	for _, sig := range policy.Signals() {
		m.SetSignal(sig, policy.Observation{Available: 5000, Capacity: 10000})
		m.SetThreshold(sig, "hard", 1000)
	}
	got := series(t, m)
	seen := map[string]bool{}
	for _, sig := range policy.Signals() {
		suffix := "_" + string(sig.Unit())
		if sig.Unit() == "" {
			t.Errorf("%s: no unit in policy's registry", sig)
			continue
		}
		var readings, capacities, thresholds []string
		for name := range got {
			family, lbl, _ := strings.Cut(name, "{")
			if lbl != string(sig)+"}" && lbl != string(sig)+",hard}" {
				continue
			}
			seen[name] = true
			if !strings.HasSuffix(family, suffix) {
				t.Errorf("%s (unit %s) is exported in %s, not a family of suffix %s", sig, sig.Unit(), family, suffix)
			}
			switch {
			case strings.HasPrefix(family, "evictiond_threshold_"):
				thresholds = append(thresholds, family)
			case strings.HasPrefix(family, "evictiond_signal_capacity_"):
				capacities = append(capacities, family)
			default:
				readings = append(readings, family)
			}
		}
		wantCapacities := 1
		if sig.IsPSI() {
			wantCapacities = 0
		}
		if len(readings) != 1 || len(thresholds) != 1 || len(capacities) != wantCapacities {
			t.Errorf("%s: readings in %v, thresholds in %v, capacities in %v; want one each (no capacity for PSI)", sig, readings, thresholds, capacities)
		}
	}
	for name := range got {
		if !seen[name] {
			t.Errorf("series %s is no signal's", name)
		}
	}
}

// The values are in the families' base units: bytes, inodes and PIDs as read; PSI as the
// stalled share, from the engine's headroom (9600 of PSIScale is a 4% stall), thresholds
// as the configuration compiles them ("40%" of stall is 0.4).
func TestSignalValuesAreInBaseUnits(t *testing.T) {
	cfg, errs := policy.Load([]byte(`apiVersion: evictiond.io/v1alpha1
kind: EvictionConfiguration
evictionHard:
  memory.available: 25%
  nodefs.inodesFree: 5%
  pid.available: 1000
  memory.pressure.some.avg10: 40%
  allocatableMemory.pressure.full.avg60: 12.5%
`))
	if errs != nil {
		t.Fatal(errs)
	}
	obs := policy.Observations{
		policy.SignalMemoryAvailable:                {Available: 512 << 20, Capacity: 4 << 30},
		policy.SignalNodeFsInodesFree:               {Available: 90000, Capacity: 1000000},
		policy.SignalPIDAvailable:                   {Available: 4190000, Capacity: 4194304},
		policy.SignalMemoryPSISomeAvg10:             {Available: 9600, Capacity: policy.PSIScale},
		policy.SignalAllocatableMemoryPSIFullAvg60:  {Available: policy.PSIScale, Capacity: policy.PSIScale},
		policy.SignalAllocatableMemoryPSISomeAvg300: {Available: 0, Capacity: policy.PSIScale},
	}
	m := New()
	for sig, o := range obs {
		m.SetSignal(sig, o)
	}
	for _, th := range cfg.Thresholds {
		if o, ok := obs[th.Signal]; ok && th.Hard() {
			m.SetThreshold(th.Signal, "hard", th.Value.Resolve(o.Capacity))
		}
	}
	want := map[string]float64{
		"evictiond_signal_available_bytes{memory.available}":                            512 << 20,
		"evictiond_signal_capacity_bytes{memory.available}":                             4 << 30,
		"evictiond_threshold_bytes{memory.available,hard}":                              1 << 30,
		"evictiond_signal_available_inodes{nodefs.inodesFree}":                          90000,
		"evictiond_signal_capacity_inodes{nodefs.inodesFree}":                           1000000,
		"evictiond_threshold_inodes{nodefs.inodesFree,hard}":                            50000,
		"evictiond_signal_available_pids{pid.available}":                                4190000,
		"evictiond_signal_capacity_pids{pid.available}":                                 4194304,
		"evictiond_threshold_pids{pid.available,hard}":                                  1000,
		"evictiond_signal_stalled_ratio{memory.pressure.some.avg10}":                    0.04,
		"evictiond_threshold_stalled_ratio{memory.pressure.some.avg10,hard}":            0.4,
		"evictiond_signal_stalled_ratio{allocatableMemory.pressure.full.avg60}":         0,
		"evictiond_threshold_stalled_ratio{allocatableMemory.pressure.full.avg60,hard}": 0.125,
		"evictiond_signal_stalled_ratio{allocatableMemory.pressure.some.avg300}":        1,
	}
	got := series(t, m)
	for name, v := range want {
		if g, ok := got[name]; !ok || g != v {
			t.Errorf("%s = %v (exported %v), want %v", name, g, ok, v)
		}
	}
	for name, v := range got {
		if _, ok := want[name]; !ok {
			t.Errorf("unexpected series %s = %v", name, v)
		}
	}
}

// The families of mixed units exist only with the option, with the engine's values as
// before (PSI as headroom), beside the new ones; a missing signal and a new configuration
// drop their series in both.
func TestLegacySignalFamiliesOnlyWithTheOption(t *testing.T) {
	psi := policy.SignalMemoryPSISomeAvg10
	for _, legacy := range []bool{false, true} {
		m := NewWithOptions(Options{LegacySignalFamilies: legacy})
		m.SetSignal(psi, policy.Observation{Available: 9600, Capacity: policy.PSIScale})
		m.SetSignal(policy.SignalMemoryAvailable, policy.Observation{Available: 100, Capacity: 200})
		m.SetThreshold(psi, "soft", 7000)
		got := series(t, m)
		old := map[string]float64{
			"evictiond_signal_available{memory.pressure.some.avg10}": 9600,
			"evictiond_signal_capacity{memory.pressure.some.avg10}":  policy.PSIScale,
			"evictiond_threshold{memory.pressure.some.avg10,soft}":   7000,
			"evictiond_signal_available{memory.available}":           100,
			"evictiond_signal_capacity{memory.available}":            200,
		}
		for name, v := range old {
			if g, ok := got[name]; ok != legacy || ok && g != v {
				t.Errorf("legacy %v: %s = %v (exported %v), want %v exported only with the option", legacy, name, g, ok, v)
			}
		}
		if got["evictiond_signal_stalled_ratio{memory.pressure.some.avg10}"] != 0.04 ||
			got["evictiond_threshold_stalled_ratio{memory.pressure.some.avg10,soft}"] != 0.3 {
			t.Errorf("legacy %v: the families of one unit are not exported as without it: %v", legacy, got)
		}

		m.DeleteSignal(psi)
		m.ResetThresholds()
		got = series(t, m)
		for name := range got {
			if strings.Contains(name, string(psi)) {
				t.Errorf("legacy %v: %s still exported after DeleteSignal and ResetThresholds", legacy, name)
			}
		}
		if len(got) != map[bool]int{false: 2, true: 4}[legacy] {
			t.Errorf("legacy %v: memory.available's reading and capacity should remain, got %v", legacy, got)
		}
	}
}
