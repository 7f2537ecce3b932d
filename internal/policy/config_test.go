package policy

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"
)

// Section 2.2 of reference/kubelet-eviction.md: parseThresholdStatement.
func TestParseThresholdValue_KubeletStatementRules(t *testing.T) {
	cases := []struct {
		name     string
		signal   Signal
		value    string
		disabled bool    // "0%" / "100%": no threshold
		quantity int64   // expected quantity, or
		percent  float32 // expected fraction
		err      string  // expected rule, if an error
	}{
		{name: "quantity", signal: SignalMemoryAvailable, value: "500Mi", quantity: 500 * Mi},
		{name: "decimal quantity", signal: SignalNodeFsAvailable, value: "1G", quantity: 1_000_000_000},
		{name: "plain number", signal: SignalPIDAvailable, value: "1000", quantity: 1000},
		{name: "surrounding blanks trimmed", signal: SignalMemoryAvailable, value: " 1Gi ", quantity: Gi},
		{name: "percentage", signal: SignalNodeFsAvailable, value: "10%", percent: 0.10},
		{name: "fractional percentage", signal: SignalNodeFsAvailable, value: "7.5%", percent: 0.075},
		{name: "0% disables the signal", signal: SignalNodeFsAvailable, value: "0%", disabled: true},
		{name: "100% disables the signal", signal: SignalImageFsAvailable, value: "100%", disabled: true},
		{name: "100.0% disables the signal too (the kubelet would evict every pod)", signal: SignalImageFsAvailable, value: "100.0%", disabled: true},
		{name: "0.00% disables the signal too", signal: SignalNodeFsAvailable, value: "0.00%", disabled: true},
		{name: "PSI 100% disables", signal: SignalMemoryPSIFullAvg10, value: "100%", disabled: true},
		{name: "percentage over 100", signal: SignalNodeFsAvailable, value: "100.5%", err: "eviction percentage threshold must be <= 100%"},
		{name: "negative percentage", signal: SignalNodeFsAvailable, value: "-5%", err: "eviction percentage threshold must be >= 0%"},
		{name: "NaN percentage", signal: SignalNodeFsAvailable, value: "NaN%", err: thresholdFormsRule},
		{name: "Inf percentage", signal: SignalNodeFsAvailable, value: "Inf%", err: "eviction percentage threshold must be <= 100%"},
		{name: "percentage not a number", signal: SignalNodeFsAvailable, value: "ten%", err: thresholdFormsRule},
		{name: "zero quantity", signal: SignalMemoryAvailable, value: "0", err: "eviction threshold must be positive"},
		{name: "zero quantity with unit", signal: SignalMemoryAvailable, value: "0Mi", err: "eviction threshold must be positive"},
		{name: "negative quantity", signal: SignalMemoryAvailable, value: "-100Mi", err: "eviction threshold must be positive"},
		{name: "not a quantity", signal: SignalMemoryAvailable, value: "lots", err: thresholdFormsRule},
		{name: "empty", signal: SignalMemoryAvailable, value: "", err: "must not be empty"},
		{name: "PSI stall percentage is inverted into exact headroom", signal: SignalMemoryPSISomeAvg10, value: "40%", quantity: 6000},
		{name: "PSI stall with hundredths", signal: SignalMemoryPSIFullAvg300, value: "30.01%", quantity: 6999},
		{name: "PSI quantity refused", signal: SignalMemoryPSIFullAvg60, value: "40", err: "a pressure stall threshold is a percentage of time stalled, like 40%"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			v, raw, err := parseThresholdValue(tc.signal, tc.value)
			if tc.err != "" {
				if err == nil || err.Error() != tc.err {
					t.Fatalf("parseThresholdValue(%s, %q) error = %v, want %q", tc.signal, tc.value, err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatalf("parseThresholdValue(%s, %q): %v", tc.signal, tc.value, err)
			}
			switch {
			case tc.disabled:
				if v != nil {
					t.Fatalf("parseThresholdValue(%s, %q) = %+v, want nil (disabled)", tc.signal, tc.value, v)
				}
			case tc.quantity != 0:
				if v == nil || v.Quantity == nil || v.Quantity.Value() != tc.quantity {
					t.Fatalf("parseThresholdValue(%s, %q) = %+v, want quantity %d", tc.signal, tc.value, v, tc.quantity)
				}
				if raw != strings.TrimSpace(tc.value) {
					t.Errorf("raw = %q, want %q", raw, strings.TrimSpace(tc.value))
				}
			default:
				if v == nil || v.Quantity != nil || abs32(v.Percentage-tc.percent) > 1e-6 {
					t.Fatalf("parseThresholdValue(%s, %q) = %+v, want percentage %v", tc.signal, tc.value, v, tc.percent)
				}
			}
		})
	}
}

func abs32(f float32) float32 {
	if f < 0 {
		return -f
	}
	return f
}

// Section 2.2: minimum reclaim — percentage > 0, quantity >= 0, attached to
// every threshold (hard and soft) of its signal.
func TestParseMinReclaim_KubeletRules(t *testing.T) {
	cases := []struct {
		value string
		want  int64 // resolved against a capacity of 1000
		err   string
	}{
		{value: "256", want: 256},
		{value: "0", want: 0}, // zero quantity allowed
		{value: "5%", want: 50},
		{value: "0%", err: "eviction percentage minimum reclaim must be positive"},
		{value: "-1%", err: "eviction percentage minimum reclaim must be positive"},
		{value: "101%", err: "eviction percentage minimum reclaim must be <= 100%"},
		{value: "NaN%", err: "must be a quantity (500Mi) or a percentage (10%)"},
		{value: "-1Mi", err: "negative eviction minimum reclaim"},
		{value: "x", err: "must be a quantity (500Mi) or a percentage (10%)"},
	}
	for _, tc := range cases {
		t.Run(tc.value, func(t *testing.T) {
			v, err := parseMinReclaim(SignalMemoryAvailable, tc.value)
			if tc.err != "" {
				if err == nil || err.Error() != tc.err {
					t.Fatalf("parseMinReclaim(%q) error = %v, want %q", tc.value, err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatalf("parseMinReclaim(%q): %v", tc.value, err)
			}
			if got := v.Resolve(1000); got != tc.want {
				t.Fatalf("parseMinReclaim(%q).Resolve(1000) = %d, want %d", tc.value, got, tc.want)
			}
		})
	}
}

func TestCompile_MinimumReclaimAttachedToHardAndSoft(t *testing.T) {
	cfg := mustLoad(t, `
evictionHard: {memory.available: 500Mi, nodefs.available: 10%}
evictionSoft: {memory.available: 1Gi}
evictionSoftGracePeriod: {memory.available: 1m}
evictionMinimumReclaim: {memory.available: 256Mi}`)
	for _, th := range cfg.Thresholds {
		want := int64(0)
		if th.Signal == SignalMemoryAvailable || th.Signal == SignalAllocatableMemoryAvailable {
			want = 256 * Mi
		}
		if got := th.minReclaim(8 * Gi); got != want {
			t.Errorf("%s (hard=%v) minimum reclaim = %d, want %d", th.Signal, th.Hard(), got, want)
		}
	}
}

// Section 2.4: defaults, partial override, mergeDefaultEvictionSettings.
func TestCompile_EvictionHardDefaults(t *testing.T) {
	cases := []struct {
		name string
		body string
		want map[Signal]string // hard thresholds, raw value (allocatable derived ones left out)
	}{
		{name: "unset gives the kubelet's Linux defaults", body: "",
			want: map[Signal]string{SignalMemoryAvailable: "100Mi", SignalNodeFsAvailable: "10%", SignalNodeFsInodesFree: "5%", SignalImageFsAvailable: "15%", SignalImageFsInodesFree: "5%"}},
		{name: "null gives the defaults", body: "evictionHard: null",
			want: map[Signal]string{SignalMemoryAvailable: "100Mi", SignalNodeFsAvailable: "10%", SignalNodeFsInodesFree: "5%", SignalImageFsAvailable: "15%", SignalImageFsInodesFree: "5%"}},
		{name: "empty mapping disables every default", body: "evictionHard: {}", want: map[Signal]string{}},
		{name: "partial override drops the other defaults (kubernetes#112057)", body: "evictionHard: {memory.available: 500Mi}",
			want: map[Signal]string{SignalMemoryAvailable: "500Mi"}},
		{name: "merge fills the missing defaults and keeps the override", body: "mergeDefaultEvictionSettings: true\nevictionHard: {memory.available: 500Mi}",
			want: map[Signal]string{SignalMemoryAvailable: "500Mi", SignalNodeFsAvailable: "10%", SignalNodeFsInodesFree: "5%", SignalImageFsAvailable: "15%", SignalImageFsInodesFree: "5%"}},
		{name: "merge keeps a signal disabled with 0%", body: "mergeDefaultEvictionSettings: true\nevictionHard: {imagefs.available: 0%}",
			want: map[Signal]string{SignalMemoryAvailable: "100Mi", SignalNodeFsAvailable: "10%", SignalNodeFsInodesFree: "5%", SignalImageFsInodesFree: "5%"}},
		{name: "merge in flag form", body: "mergeDefaultEvictionSettings: true\nevictionHard: \"nodefs.available<20%\"",
			want: map[Signal]string{SignalMemoryAvailable: "100Mi", SignalNodeFsAvailable: "20%", SignalNodeFsInodesFree: "5%", SignalImageFsAvailable: "15%", SignalImageFsInodesFree: "5%"}},
		{name: "merge does not apply to soft thresholds", body: "mergeDefaultEvictionSettings: true\nevictionHard: {}\nevictionSoft: {memory.available: 1Gi}\nevictionSoftGracePeriod: {memory.available: 1m}",
			want: map[Signal]string{SignalMemoryAvailable: "100Mi", SignalNodeFsAvailable: "10%", SignalNodeFsInodesFree: "5%", SignalImageFsAvailable: "15%", SignalImageFsInodesFree: "5%"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cfg := mustLoad(t, tc.body)
			got := map[Signal]string{}
			for _, th := range cfg.Thresholds {
				if th.Hard() && th.DerivedFrom == "" {
					got[th.Signal] = th.Raw
				}
			}
			if fmt.Sprint(got) != fmt.Sprint(tc.want) {
				t.Fatalf("hard thresholds = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestCompile_SoftThresholdsNeedGracePeriods(t *testing.T) {
	cases := []struct {
		name string
		body string
		errs []string
		soft map[Signal]time.Duration
	}{
		{name: "grace period given", body: "evictionSoft: {memory.available: 1Gi}\nevictionSoftGracePeriod: {memory.available: 1m30s}",
			soft: map[Signal]time.Duration{SignalMemoryAvailable: 90 * time.Second}},
		{name: "grace period missing", body: "evictionSoft: {memory.available: 1Gi}",
			errs: []string{`evictionSoft[memory.available]: "1Gi": grace period must be specified for the soft eviction threshold in evictionSoftGracePeriod`}},
		{name: "grace period of another signal does not count", body: "evictionSoft: {memory.available: 1Gi}\nevictionSoftGracePeriod: {nodefs.available: 1m}",
			errs: []string{`evictionSoft[memory.available]: "1Gi": grace period must be specified for the soft eviction threshold in evictionSoftGracePeriod`}},
		{name: "malformed grace period is one error, not two", body: "evictionSoft: {memory.available: 1Gi}\nevictionSoftGracePeriod: {memory.available: 90}",
			errs: []string{`evictionSoftGracePeriod[memory.available]: "90": must be a duration like 1m30s`}},
		{name: "negative grace period", body: "evictionSoft: {memory.available: 1Gi}\nevictionSoftGracePeriod: {memory.available: -1m}",
			errs: []string{`evictionSoftGracePeriod[memory.available]: "-1m": invalid eviction grace period, must be a positive value`}},
		{name: "grace period without soft threshold is unused, not an error", body: "evictionSoftGracePeriod: {memory.available: 1m}",
			soft: map[Signal]time.Duration{}},
		{name: "grace period for an unknown signal", body: "evictionSoftGracePeriod: {memory.free: 1m}",
			errs: []string{`evictionSoftGracePeriod[memory.free]: "1m": unsupported eviction signal; one of ` + signalList()}},
		{name: "flag form", body: "evictionSoft: \"memory.available<1Gi,nodefs.available<15%\"\nevictionSoftGracePeriod: \"memory.available=1m,nodefs.available=2m\"",
			soft: map[Signal]time.Duration{SignalMemoryAvailable: time.Minute, SignalNodeFsAvailable: 2 * time.Minute}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			errs := loadErrors(t, tc.body)
			if !slices.Equal(errs, tc.errs) {
				t.Fatalf("errors:\n%s\nwant:\n%s", strings.Join(errs, "\n"), strings.Join(tc.errs, "\n"))
			}
			if tc.errs != nil {
				return
			}
			got := map[Signal]time.Duration{}
			for _, th := range mustLoad(t, tc.body).Thresholds {
				if !th.Hard() {
					got[th.Signal] = th.GracePeriod
				}
			}
			if fmt.Sprint(got) != fmt.Sprint(tc.soft) {
				t.Fatalf("soft thresholds = %v, want %v", got, tc.soft)
			}
		})
	}
}

// A soft threshold with a grace period of 0s is treated as hard, as the
// kubelet does (isHardEvictionThreshold).
func TestCompile_SoftThresholdWithZeroGraceIsHard(t *testing.T) {
	cfg := mustLoad(t, "evictionHard: {}\nevictionSoft: {memory.available: 1Gi}\nevictionSoftGracePeriod: {memory.available: 0s}\nenforceNodeAllocatable: []")
	if len(cfg.Thresholds) != 1 || !cfg.Thresholds[0].Hard() {
		t.Fatalf("thresholds = %s, want one hard memory.available", signalsOf(cfg.Thresholds))
	}
}

// Flag form, with its duplicate-signal rule (the kubelet's legacy
// "duplicate-signal" case).
func TestParseFlagForm(t *testing.T) {
	cases := []struct {
		name       string
		in         string
		thresholds bool
		want       map[string]string
		errs       []string // FieldError text with Field set to "f"
	}{
		{name: "two thresholds", in: "memory.available<500Mi,nodefs.available<10%", thresholds: true,
			want: map[string]string{"memory.available": "500Mi", "nodefs.available": "10%"}},
		{name: "blanks and empty statements", in: " memory.available < 500Mi , ,nodefs.available<10% ", thresholds: true,
			want: map[string]string{"memory.available": "500Mi", "nodefs.available": "10%"}},
		{name: "empty string", in: "", thresholds: true, want: map[string]string{}},
		{name: "PSI uses >", in: "memory.pressure.some.avg10>40%", thresholds: true,
			want: map[string]string{"memory.pressure.some.avg10": "40%"}},
		{name: "PSI with < refused", in: "memory.pressure.some.avg10<40%", thresholds: true, want: map[string]string{},
			errs: []string{`f[memory.pressure.some.avg10]: "memory.pressure.some.avg10<40%": a pressure stall threshold uses ">", like memory.pressure.some.avg10>40%`}},
		{name: "> refused for a kubelet signal", in: "memory.available>500Mi", thresholds: true, want: map[string]string{},
			errs: []string{`f[memory.available]: "memory.available>500Mi": only "<" is supported for memory.available`}},
		{name: "duplicate signal", in: "memory.available<150Mi,memory.available<100Mi", thresholds: true,
			want: map[string]string{"memory.available": "150Mi"},
			errs: []string{`f[memory.available]: "memory.available<100Mi": duplicate signal: each signal may appear once`}},
		{name: "missing operator", in: "memory.available=500Mi", thresholds: true, want: map[string]string{},
			errs: []string{`f: "memory.available=500Mi": a statement is <signal><<value>, like memory.available<500Mi`}},
		{name: "grace periods", in: "memory.available=1m30s,nodefs.available=2m", want: map[string]string{"memory.available": "1m30s", "nodefs.available": "2m"}},
		{name: "duplicate grace period", in: "memory.available=1m,memory.available=2m",
			want: map[string]string{"memory.available": "1m"},
			errs: []string{`f[memory.available]: "memory.available=2m": duplicate signal: each signal may appear once`}},
		{name: "grace period missing =", in: "memory.available:1m", want: map[string]string{},
			errs: []string{`f: "memory.available:1m": a statement is <signal>=<value>, like memory.available=1m30s`}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, errs := ParseFlagForm(tc.in, tc.thresholds)
			var texts []string
			for _, e := range errs {
				e.Field = "f"
				texts = append(texts, e.Error())
			}
			if !slices.Equal(texts, tc.errs) {
				t.Errorf("errors:\n%s\nwant:\n%s", strings.Join(texts, "\n"), strings.Join(tc.errs, "\n"))
			}
			if fmt.Sprint(got) != fmt.Sprint(tc.want) {
				t.Errorf("ParseFlagForm(%q) = %v, want %v", tc.in, got, tc.want)
			}
		})
	}
}

// Section 1.2: allocatableMemory.available comes from hard memory.available
// thresholds only, only with enforceNodeAllocatable "pods"; an explicit one wins.
func TestCompile_AllocatableMemoryDerivation(t *testing.T) {
	cases := []struct {
		name string
		body string
		want []string // allocatableMemory.available thresholds: raw/hard|soft/derived
	}{
		{name: "derived from hard memory.available by default", body: "evictionHard: {memory.available: 500Mi}",
			want: []string{"500Mi/hard/derived"}},
		{name: "derived from the default memory threshold", body: "",
			want: []string{"100Mi/hard/derived"}},
		{name: "not derived from soft thresholds", body: "evictionHard: {}\nevictionSoft: {memory.available: 1Gi}\nevictionSoftGracePeriod: {memory.available: 1m}",
			want: nil},
		{name: "not derived without pods in enforceNodeAllocatable", body: "evictionHard: {memory.available: 500Mi}\nenforceNodeAllocatable: [system-reserved]",
			want: nil},
		{name: "not derived with an empty enforceNodeAllocatable", body: "evictionHard: {memory.available: 500Mi}\nenforceNodeAllocatable: []",
			want: nil},
		{name: "explicit hard threshold wins", body: "evictionHard: {memory.available: 500Mi, allocatableMemory.available: 300Mi}",
			want: []string{"300Mi/hard/explicit"}},
		{name: "explicit soft threshold does not stop the derived hard one", body: "evictionHard: {memory.available: 500Mi}\nevictionSoft: {allocatableMemory.available: 1Gi}\nevictionSoftGracePeriod: {allocatableMemory.available: 1m}",
			want: []string{"500Mi/hard/derived", "1Gi/soft/explicit"}},
		{name: "minimum reclaim is carried over", body: "evictionHard: {memory.available: 500Mi}\nevictionMinimumReclaim: {memory.available: 100Mi}",
			want: []string{"500Mi/hard/derived"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cfg := mustLoad(t, tc.body)
			var got []string
			for _, th := range cfg.Thresholds {
				if th.Signal != SignalAllocatableMemoryAvailable {
					continue
				}
				kind, origin := "hard", "explicit"
				if !th.Hard() {
					kind = "soft"
				}
				if th.DerivedFrom == SignalMemoryAvailable {
					origin = "derived"
				}
				got = append(got, th.Raw+"/"+kind+"/"+origin)
				if origin == "derived" {
					for _, m := range cfg.Thresholds {
						if m.Signal == SignalMemoryAvailable && m.Hard() && m.minReclaim(Gi) != th.minReclaim(Gi) {
							t.Errorf("derived minimum reclaim %d, memory.available's %d", th.minReclaim(Gi), m.minReclaim(Gi))
						}
					}
				}
			}
			if !slices.Equal(got, tc.want) {
				t.Fatalf("allocatableMemory.available thresholds = %v, want %v", got, tc.want)
			}
		})
	}
}

// Section 1.3: explicit containerfs.* thresholds are ignored with a warning,
// and ThresholdsFor derives them per filesystem layout.
func TestCompile_ContainerFsThresholdsIgnoredWithWarning(t *testing.T) {
	cfg := mustLoad(t, "evictionHard: {nodefs.available: 10%, containerfs.available: 50%}\nevictionSoft: {containerfs.inodesFree: 20%}\nevictionSoftGracePeriod: {containerfs.inodesFree: 1m}")
	for _, th := range cfg.Thresholds {
		if th.Signal == SignalContainerFsAvailable || th.Signal == SignalContainerFsInodesFree {
			t.Errorf("explicit %s threshold kept: %+v", th.Signal, th)
		}
	}
	if len(cfg.Warnings) != 1 || !strings.Contains(cfg.Warnings[0], "evictionHard[containerfs.available], evictionSoft[containerfs.inodesFree] ignored") {
		t.Fatalf("warnings = %q, want one naming both ignored thresholds", cfg.Warnings)
	}
}

func TestThresholdsFor_ContainerFsDerivedPerLayout(t *testing.T) {
	cfg := mustLoad(t, `
evictionHard: {nodefs.available: 10%, nodefs.inodesFree: 5%, imagefs.available: 15%, imagefs.inodesFree: 4%}
evictionSoft: {nodefs.available: 20%}
evictionSoftGracePeriod: {nodefs.available: 1m}`)
	cases := []struct {
		name   string
		layout FilesystemLayout
		want   []string // containerfs thresholds: signal/kind/raw<-from
	}{
		{name: "single filesystem copies nodefs", layout: FilesystemLayout{},
			want: []string{"containerfs.available/hard/10%<-nodefs.available", "containerfs.available/soft/20%<-nodefs.available", "containerfs.inodesFree/hard/5%<-nodefs.inodesFree"}},
		{name: "dedicated imagefs copies imagefs", layout: FilesystemLayout{DedicatedImageFs: true},
			want: []string{"containerfs.available/hard/15%<-imagefs.available", "containerfs.inodesFree/hard/4%<-imagefs.inodesFree"}},
		{name: "split imagefs and containerfs copies nodefs", layout: FilesystemLayout{DedicatedImageFs: true, SplitContainerFs: true},
			want: []string{"containerfs.available/hard/10%<-nodefs.available", "containerfs.available/soft/20%<-nodefs.available", "containerfs.inodesFree/hard/5%<-nodefs.inodesFree"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var got []string
			for _, th := range ThresholdsFor(cfg.Thresholds, tc.layout) {
				if th.Signal != SignalContainerFsAvailable && th.Signal != SignalContainerFsInodesFree {
					continue
				}
				kind := "hard"
				if !th.Hard() {
					kind = "soft"
				}
				got = append(got, fmt.Sprintf("%s/%s/%s<-%s", th.Signal, kind, th.Raw, th.DerivedFrom))
			}
			if !slices.Equal(got, tc.want) {
				t.Fatalf("containerfs thresholds = %v, want %v", got, tc.want)
			}
			if n := len(cfg.Thresholds); n != 5 { // 4 hard + 1 soft, no memory threshold to derive from
				t.Fatalf("ThresholdsFor changed its input: %d thresholds", n)
			}
		})
	}
}

// PSI thresholds: ">" in flag form, percentage only, met when the stall
// rises above the threshold.
// Every PSI threshold a user can write (the kernel reports hundredths of a
// percent) is met from exactly 0.01% above it.
func TestPSIThreshold_BoundaryIsExact(t *testing.T) {
	for hundredths := int64(1); hundredths < PSIScale; hundredths += 7 {
		raw := fmt.Sprintf("%d.%02d%%", hundredths/100, hundredths%100)
		v, _, err := parseThresholdValue(SignalMemoryPSISomeAvg10, raw)
		if err != nil {
			t.Fatalf("%s: %v", raw, err)
		}
		th := []Threshold{{Signal: SignalMemoryPSISomeAvg10, Value: *v}}
		stall := func(h int64) Observations {
			return Observations{SignalMemoryPSISomeAvg10: {Available: PSIScale - h, Capacity: PSIScale}}
		}
		if len(thresholdsMet(th, stall(hundredths), false)) != 0 {
			t.Fatalf("threshold %s met by a stall equal to it", raw)
		}
		if len(thresholdsMet(th, stall(hundredths+1), false)) != 1 {
			t.Fatalf("threshold %s not met by a stall 0.01%% above it", raw)
		}
	}
	mr, err := parseMinReclaim(SignalMemoryPSISomeAvg10, "5.07%")
	if err != nil || mr.Resolve(PSIScale) != 507 {
		t.Fatalf("PSI minimum reclaim 5.07%% = %v (%v), want 507 hundredths", mr, err)
	}
}

func TestPSIThreshold_MetWhenStallRisesAbove(t *testing.T) {
	cfg := mustLoad(t, "evictionHard: \"memory.pressure.some.avg10>40%\"")
	if len(cfg.Thresholds) != 1 || cfg.Thresholds[0].Signal != SignalMemoryPSISomeAvg10 {
		t.Fatalf("thresholds = %s", signalsOf(cfg.Thresholds))
	}
	psi := func(stallPct float64) Observations {
		return Observations{SignalMemoryPSISomeAvg10: {Available: PSIScale - int64(stallPct*100), Capacity: PSIScale, Time: t0}}
	}
	for _, tc := range []struct {
		stall float64
		met   bool
	}{{0, false}, {39.99, false}, {40, false}, {40.01, true}, {100, true}} {
		got := len(thresholdsMet(cfg.Thresholds, psi(tc.stall), false)) == 1
		if got != tc.met {
			t.Errorf("stall %.2f%% against >40%%: met = %v, want %v", tc.stall, got, tc.met)
		}
	}
}

// Every bad input of the Proof section gives one error naming the
// field, the value and the rule; none panics.
func TestLoad_BadInputErrorText(t *testing.T) {
	cases := []struct {
		name string
		body string
		want []string
	}{
		{name: "unknown signal", body: "evictionHard: {memory.free: 100Mi}",
			want: []string{`evictionHard[memory.free]: "100Mi": unsupported eviction signal; one of ` + signalList()}},
		{name: "unknown signal in flag form", body: `evictionSoft: "disk.available<1Gi"`,
			want: []string{`evictionSoft[disk.available]: "1Gi": unsupported eviction signal; one of ` + signalList()}},
		{name: "no signal name in flag form", body: `evictionHard: "memory.available<1Gi,<5%"`,
			want: []string{`evictionHard: "<5%": a statement starts with a signal name of letters, digits and dots, like memory.available`}},
		{name: "unknown top-level field", body: "evictionHrad: {memory.available: 100Mi}",
			want: []string{`evictionHrad: "{\"memory.available\":\"100Mi\"}": unknown field: not part of EvictionConfiguration`}},
		{name: "unknown nested field", body: "loop: {intervall: 1s}",
			want: []string{`loop.intervall: "\"1s\"": unknown field: not part of EvictionConfiguration`}},
		{name: "unknown field inside a list", body: "exclusions: {podSelector: {matchExpressions: [{key: a, operator: Exists, valuez: [b]}]}}",
			want: []string{`exclusions.podSelector.matchExpressions[0].valuez: "exclusions.podSelector.matchExpressions[0].valuez": unknown field: not part of EvictionConfiguration`}},
		{name: "negative quantity", body: "evictionHard: {memory.available: -100Mi}",
			want: []string{`evictionHard[memory.available]: "-100Mi": eviction threshold must be positive`}},
		{name: "zero quantity", body: `evictionHard: {memory.available: "0"}`,
			want: []string{`evictionHard[memory.available]: "0": eviction threshold must be positive`}},
		{name: "zero quantity written as a YAML number", body: `evictionHard: {memory.available: 0}`,
			want: []string{`evictionHard[memory.available]: "0": eviction threshold must be positive`}},
		{name: "percentage over 100%", body: "evictionHard: {nodefs.available: 110%}",
			want: []string{`evictionHard[nodefs.available]: "110%": eviction percentage threshold must be <= 100%`}},
		{name: "soft threshold without grace period", body: "evictionSoft: {nodefs.available: 15%}",
			want: []string{`evictionSoft[nodefs.available]: "15%": grace period must be specified for the soft eviction threshold in evictionSoftGracePeriod`}},
		{name: "malformed grace period", body: "evictionSoft: {nodefs.available: 15%}\nevictionSoftGracePeriod: {nodefs.available: 2 minutes}",
			want: []string{`evictionSoftGracePeriod[nodefs.available]: "2 minutes": must be a duration like 1m30s`}},
		{name: "malformed duration field", body: "evictionPressureTransitionPeriod: 5 min",
			want: []string{`evictionPressureTransitionPeriod: "5 min": must be a duration like 30s, 1m30s or 500ms`}},
		{name: "malformed loop interval", body: "loop: {interval: fast}",
			want: []string{`loop.interval: "fast": must be a duration like 30s, 1m30s or 500ms`}},
		{name: "duplicate signal in flag form", body: `evictionHard: "memory.available<150Mi,memory.available<100Mi"`,
			want: []string{`evictionHard[memory.available]: "memory.available<100Mi": duplicate signal: each signal may appear once`}},
		{name: "duplicate key in YAML names the key", body: "evictionHard: {memory.available: 100Mi}\nevictionHard: {memory.available: 200Mi}",
			want: []string{`(document): "line 4: key \"evictionHard\" already set in map": must be valid YAML: one document, no duplicate keys, no excessive aliasing`}},
		{name: "wrong type names the value", body: "evictionMaxPodGracePeriod: thirty",
			want: []string{`evictionMaxPodGracePeriod: "\"thirty\"": must be of type integer`}},
		{name: "negative max pod grace period", body: "evictionMaxPodGracePeriod: -1",
			want: []string{`evictionMaxPodGracePeriod: "-1": must be >= 0 seconds`}},
		{name: "every problem reported, in order", body: "evictionHard: {memory.available: -1, nodefs.available: 200%}\nevictionSoft: {memory.available: 1Gi}",
			want: []string{
				`evictionHard[memory.available]: "-1": eviction threshold must be positive`,
				`evictionHard[nodefs.available]: "200%": eviction percentage threshold must be <= 100%`,
				`evictionSoft[memory.available]: "1Gi": grace period must be specified for the soft eviction threshold in evictionSoftGracePeriod`,
			}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := loadErrors(t, tc.body)
			if !slices.Equal(got, tc.want) {
				t.Fatalf("errors:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(tc.want, "\n"))
			}
		})
	}
}

func TestLoad_RequiresHeader(t *testing.T) {
	_, errs := Load([]byte("evictionHard: {memory.available: 100Mi}"))
	want := FieldErrors{
		{Field: "apiVersion", Value: "", Rule: "must be evictiond.io/v1alpha1"},
		{Field: "kind", Value: "", Rule: "must be EvictionConfiguration"},
	}
	if errs.Error() != want.Error() {
		t.Fatalf("errors = %q, want %q", errs.Error(), want.Error())
	}
}

func TestLoad_DocumentNotAMapping(t *testing.T) {
	_, errs := Load([]byte("00"))
	if got, want := errs.Error(), `(document): "0": must be of type mapping`; got != want {
		t.Fatalf("errors = %q, want %q", got, want)
	}
}

// evictiond's own settings: bounds, enums and their error text.
func TestLoad_EvictiondSettingsRules(t *testing.T) {
	cases := []struct {
		body string
		want string
	}{
		{"loop: {interval: 1ms}", `loop.interval: "1ms": must be at least 10ms`},
		{"loop: {interval: 2m}", `loop.interval: "2m": must be at most 1m0s`},
		{"loop: {podCleanupTimeout: 500ms}", `loop.podCleanupTimeout: "500ms": must be at least 1s`},
		{"evictionPressureTransitionPeriod: -1m", `evictionPressureTransitionPeriod: "-1m": must be at least 0s`},
		{"stats: {memoryFormula: rss}", `stats.memoryFormula: "rss": must be workingSet or memAvailable`},
		{"notifier: {psi: {type: most}}", `notifier.psi.type: "most": must be some or full`},
		{"notifier: {psi: {stall: 3s, window: 2s}}", `notifier.psi.stall: "3s": must not exceed notifier.psi.window (2s)`},
		{"notifier: {psi: {window: 100ms}}", `notifier.psi.window: "100ms": must be at least 500ms`},
		{"notifier: {pollInterval: 2s, pollIdleInterval: 1s}", `notifier.pollIdleInterval: "1s": must be at least notifier.pollInterval (2s)`},
		{"notifier: {pollIdleInterval: 20s}", `notifier.pollIdleInterval: "20s": must be at most 10s`},
		{"eviction: {pdbEscalation: {maxCandidates: -1}}", `eviction.pdbEscalation.maxCandidates: "-1": must be at least 1 (unset: 3)`},
		{"eviction: {rateLimits: {maxPerPass: -2}}", `eviction.rateLimits.maxPerPass: "-2": must be at least 1 (unset: 3)`},
		{"eviction: {rateLimits: {perMinute: -0.5}}", `eviction.rateLimits.perMinute: "-0.5": must be positive (unset: 10); to stop evicting, set dryRun: true`},
		{"eviction: {rateLimits: {burst: -1}}", `eviction.rateLimits.burst: "-1": must be at least 1 (unset: 3)`},
		{"exclusions: {namespaces: [\"\"]}", `exclusions.namespaces[0]: "": must be a namespace name: lowercase letters, digits and '-', starting and ending with a letter or digit, at most 63 characters (no wildcards, no paths)`},
		{"exclusions: {minPodAge: -1s}", `exclusions.minPodAge: "-1s": must be at least 0s`},
		{"nodeStatus: {conditions: standrad}", `nodeStatus.conditions: "standrad": must be own (evictiond's own condition types, the default), standard (MemoryPressure, DiskPressure, PIDPressure), both or none`},
		{"nodeStatus: {conditions: 1}", `nodeStatus.conditions: "1": must be own (evictiond's own condition types, the default), standard (MemoryPressure, DiskPressure, PIDPressure), both or none`},
		{"nodeStatus: {taints: {diskPressure: NoExecute}}", `nodeStatus.taints.diskPressure: "NoExecute": must be NoSchedule, PreferNoSchedule or "" (no taint)`},
		{"reclaim: {criEndpoint: /run/containerd/containerd.sock}", `reclaim.criEndpoint: "/run/containerd/containerd.sock": must be a unix:// socket address`},
		{"reclaim: {imageGC: {stateFile: images.json}}", `reclaim.imageGC.stateFile: "images.json": must be an absolute path`},
		{"enforceNodeAllocatable: [pod]", `enforceNodeAllocatable: "pod": must be one of pods, system-reserved, kube-reserved, none`},
		{"exclusions: {podSelector: {matchExpressions: [{key: tier, operator: Near, values: [db]}]}}",
			`exclusions.podSelector: "{\"matchExpressions\":[{\"key\":\"tier\",\"operator\":\"Near\",\"values\":[\"db\"]}]}": must be a valid label selector: "Near" is not a valid label selector operator`},
		{"dryRun: yes please", `dryRun: "\"yes please\"": must be of type boolean (true or false)`},
	}
	for _, tc := range cases {
		t.Run(tc.body, func(t *testing.T) {
			got := loadErrors(t, tc.body)
			if len(got) != 1 || got[0] != tc.want {
				t.Fatalf("errors %q, want [%q]", got, tc.want)
			}
		})
	}
}

// nodeStatus.conditions: the modes, the default, and the booleans of earlier versions.
func TestLoad_NodeStatusConditionsModes(t *testing.T) {
	for body, want := range map[string]string{
		"":                                   ConditionsOwn,
		"nodeStatus: {conditions: own}":      ConditionsOwn,
		"nodeStatus: {conditions: standard}": ConditionsStandard,
		"nodeStatus: {conditions: both}":     ConditionsBoth,
		"nodeStatus: {conditions: none}":     ConditionsNone,
		"nodeStatus: {conditions: true}":     ConditionsStandard,
		"nodeStatus: {conditions: false}":    ConditionsNone,
	} {
		if got := mustLoad(t, body).NodeStatus.Conditions; got != want {
			t.Errorf("%q: conditions mode %q, want %q", body, got, want)
		}
	}
	if got := mustLoad(t, "").NodeStatus.Taints["MemoryPressure"]; got != "NoSchedule" {
		t.Errorf("default memory pressure taint effect %q, want NoSchedule", got)
	}
}
