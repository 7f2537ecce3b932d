package notify

import (
	"testing"
	"time"

	"github.com/evictiond/evictiond/internal/policy"
)

func TestOptionsFromConfigKeepsMemoryThresholdsAndNotifierSettings(t *testing.T) {
	cfg, errs := policy.Load([]byte(`
apiVersion: evictiond.io/v1alpha1
kind: EvictionConfiguration
evictionHard: {memory.available: 500Mi, nodefs.available: 10%, memory.pressure.full.avg10: "60%", pid.available: "1000"}
evictionSoft: {memory.available: 10%}
evictionSoftGracePeriod: {memory.available: 1m}
notifier:
  memcgThresholds: false
  pollInterval: 50ms
  psi: {type: full, stall: 200ms, window: 4s}
`))
	if len(errs) > 0 {
		t.Fatalf("config rejected: %v", errs)
	}
	opts := OptionsFromConfig(cfg)
	want := map[string]Threshold{
		"hard memory.available":            {Signal: policy.SignalMemoryAvailable, Hard: true, Available: 500 << 20},
		"soft memory.available":            {Signal: policy.SignalMemoryAvailable, Percentage: float64(float32(0.1))},
		"hard allocatableMemory.available": {Signal: policy.SignalAllocatableMemoryAvailable, Hard: true, Available: 500 << 20},
		"hard pid.available":               {Signal: policy.SignalPIDAvailable, Hard: true, Available: 1000},
		"hard nodefs.available":            {Signal: policy.SignalNodeFsAvailable, Hard: true, Percentage: float64(float32(0.1))},
	}
	if len(opts.Thresholds) != len(want) {
		t.Fatalf("thresholds = %+v, want %d memory, PID and nodefs thresholds", opts.Thresholds, len(want))
	}
	for _, th := range opts.Thresholds {
		if w, ok := want[th.name()]; !ok || w != th {
			t.Errorf("threshold %+v, want %+v", th, w)
		}
	}
	if opts.MemcgThresholds || !opts.MemoryEvents || !opts.PSI.Enabled || opts.PSI.Type != PSIFull ||
		opts.PSI.Stall != 200*time.Millisecond || opts.PSI.Window != 4*time.Second || opts.PollInterval != 50*time.Millisecond ||
		opts.PollIdleInterval != time.Second {
		t.Fatalf("notifier settings not carried over: %+v", opts)
	}
	if err := opts.withDefaults().Validate(); err != nil {
		t.Fatalf("options from a valid config do not validate: %v", err)
	}
	if !opts.PollForRates {
		t.Error("PollForRates false with the brake on (its default)")
	}
	off, errs := policy.Load([]byte("apiVersion: evictiond.io/v1alpha1\nkind: EvictionConfiguration\nevictionHard: {memory.available: 500Mi}\nbrake: {enabled: false}\n"))
	if len(errs) > 0 {
		t.Fatalf("config rejected: %v", errs)
	}
	if OptionsFromConfig(off).PollForRates {
		t.Error("PollForRates true with brake.enabled: false")
	}
}
