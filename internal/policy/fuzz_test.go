package policy

import (
	"math"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/validation"
)

// FuzzParseThresholds feeds arbitrary flag-form strings through ParseFlagForm
// and every value through parseThresholdValue and parseMinReclaim.
// Properties: no panic; every statement either lands in the map or yields an
// error; a parsed threshold is a positive quantity or a percentage in (0, 1]
// (PSI: [0, 1)); the map form re-rendered as flag form parses back to itself.
func FuzzParseThresholds(f *testing.F) {
	for _, seed := range []string{
		"memory.available<100Mi,nodefs.available<10%,nodefs.inodesFree<5%,imagefs.available<15%,imagefs.inodesFree<5%",
		"memory.available<500Mi",
		"memory.available<150Mi,memory.available<100Mi",
		"memory.pressure.some.avg10>40%",
		"allocatableMemory.pressure.full.avg60>12.5%",
		"pid.available<1000",
		"nodefs.available<0%",
		"imagefs.available<100%",
		"memory.available<-1Mi",
		"memory.available<1e3",
		"nodefs.available<NaN%",
		"memory.available=1m30s,nodefs.available=2m",
		" , memory.available < 1Gi ,",
		"<",
		">%",
		"memory.available<max(5%,500Mi),nodefs.available<min(10%, 50Gi)",
		"memory.available<max(5%,500Mi",
		"memory.available<max(5%,500Mi)),nodefs.available<10%",
		"memory.available<min(max(1%,1Gi),2Gi)",
	} {
		f.Add(seed, true)
		f.Add(seed, false)
	}
	f.Fuzz(func(t *testing.T, s string, thresholds bool) {
		m, errs := ParseFlagForm(s, thresholds)
		if m == nil {
			t.Fatalf("ParseFlagForm(%q) returned a nil map", s)
		}
		statements := 0
		for _, stmt := range splitStatements(strings.TrimSpace(s)) {
			if strings.TrimSpace(stmt) != "" {
				statements++
			}
		}
		if len(m)+len(errs) != statements {
			t.Fatalf("ParseFlagForm(%q): %d values + %d errors for %d statements", s, len(m), len(errs), statements)
		}
		for _, e := range errs {
			if e.Rule == "" || e.Value == "" {
				t.Fatalf("ParseFlagForm(%q): error without value or rule: %+v", s, e)
			}
		}
		if len(errs) == 0 && thresholds {
			// Round trip: the map rendered as flag form parses to the same map.
			var parts []string
			for _, k := range sortedKeys(m) {
				op := "<"
				if Signal(k).IsPSI() {
					op = ">"
				}
				parts = append(parts, k+op+m[k])
			}
			again, errs := ParseFlagForm(strings.Join(parts, ","), true)
			if len(errs) == 0 && !cmp.Equal(again, m) {
				t.Fatalf("round trip of %q: %v != %v", s, again, m)
			}
		}
		for sig, raw := range m {
			signal := Signal(sig)
			if !signal.Valid() {
				continue
			}
			checkThresholdValue(t, signal, raw)
			checkMinReclaim(t, signal, raw)
		}
	})
}

func checkThresholdValue(t *testing.T, signal Signal, raw string) {
	v, text, err := parseThresholdValue(signal, raw)
	if err != nil {
		if err.Error() == "" {
			t.Fatalf("parseThresholdValue(%s, %q): empty error", signal, raw)
		}
		return
	}
	if v == nil {
		p, err := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(raw), "%"), 32)
		if !strings.HasSuffix(strings.TrimSpace(raw), "%") || err != nil || p != 0 && p != 100 {
			t.Fatalf("parseThresholdValue(%s, %q) disabled a signal for a value other than 0%%/100%%", signal, raw)
		}
		return
	}
	if text != strings.TrimSpace(raw) {
		t.Fatalf("parseThresholdValue(%s, %q) raw = %q", signal, raw, text)
	}
	if v.Quantity != nil && signal.IsPSI() {
		if q := v.Quantity.Value(); q < 0 || q > PSIScale {
			t.Fatalf("parseThresholdValue(%s, %q) = headroom %d, outside [0, %d]", signal, raw, q, PSIScale)
		}
		return
	}
	if v.Quantity != nil {
		if v.Quantity.Sign() <= 0 {
			t.Fatalf("parseThresholdValue(%s, %q) = quantity %v", signal, raw, v.Quantity)
		}
		// The quantity re-parses from its canonical text to the same value.
		q, err := resource.ParseQuantity(v.Quantity.String())
		if err != nil || q.Cmp(*v.Quantity) != 0 {
			t.Fatalf("quantity %q does not round-trip through %q: %v", raw, v.Quantity.String(), err)
		}
		return
	}
	p := float64(v.Percentage)
	if math.IsNaN(p) || p < 0 || p > 1 {
		t.Fatalf("parseThresholdValue(%s, %q) = percentage %v, outside [0, 1]", signal, raw, p)
	}
	// Capacities a float64 holds exactly (as every real one does).
	for _, capacity := range []int64{0, 1, 8 << 30, 1 << 53} {
		if r := v.Resolve(capacity); r < 0 || r > capacity {
			t.Fatalf("%q resolved against %d = %d", raw, capacity, r)
		}
	}
}

func checkMinReclaim(t *testing.T, signal Signal, raw string) {
	v, err := parseMinReclaim(signal, raw)
	if err != nil {
		return
	}
	if v.Quantity != nil && v.Quantity.Sign() < 0 {
		t.Fatalf("parseMinReclaim(%q) = negative %v", raw, v.Quantity)
	}
	if v.Quantity == nil {
		p := float64(v.Percentage)
		if math.IsNaN(p) || p < 0 || p > 1 {
			t.Fatalf("parseMinReclaim(%q) = percentage %v", raw, p)
		}
	}
}

// FuzzDecodeConfig feeds arbitrary bytes to Load. Properties: no panic; a
// failure is a non-empty list of errors each naming a field and a rule; a
// configuration that loads re-loads from its own normalized YAML to an
// equal Config.
func FuzzDecodeConfig(f *testing.F) {
	header := "apiVersion: evictiond.io/v1alpha1\nkind: EvictionConfiguration\n"
	for _, seed := range []string{
		"",
		"evictionHard: {memory.available: 500Mi, nodefs.available: 10%}",
		"evictionHard: {memory.available: 100Mi}\nmergeDefaultEvictionSettings: true",
		"evictionHard: \"memory.available<1Gi,nodefs.available<15%\"\nevictionSoft: \"memory.available<2Gi\"\nevictionSoftGracePeriod: \"memory.available=1m30s\"\nevictionMinimumReclaim: \"memory.available=256Mi\"",
		"evictionHard: {memory.available: 500Mi}\nevictionSoft: {memory.available: 1Gi, memory.pressure.some.avg10: 40%}\nevictionSoftGracePeriod: {memory.available: 30s, memory.pressure.some.avg10: 1m}\nevictionMinimumReclaim: {memory.available: 256Mi, memory.pressure.some.avg10: 5%}\nevictionPressureTransitionPeriod: 1m\nevictionMaxPodGracePeriod: 20",
		"evictionHard: {containerfs.available: 10%}\nenforceNodeAllocatable: [pods, system-reserved]\nlocalStorageCapacityIsolation: false",
		"loop: {interval: 500ms, podCleanupTimeout: 1m}\nstats: {housekeepingInterval: 15s, memoryFormula: memAvailable}\nnotifier: {memcgThresholds: false, psi: {type: full, stall: 150ms, window: 1s}, pollInterval: 50ms}",
		"eviction: {pdbEscalation: {maxCandidates: 5, delete: false}, rateLimits: {maxPerPass: 1, perMinute: 2.5, burst: 2, cooldown: 10s}, apiUnreachable: {criStop: true, after: 30s}}",
		"exclusions: {namespaces: [kube-system], podSelector: {matchExpressions: [{key: tier, operator: In, values: [db]}]}, daemonSetPods: false, minPodAge: 5m}",
		"nodeStatus: {conditions: true, reassertInterval: 2s, taints: {memoryPressure: NoSchedule, diskPressure: \"\", pidPressure: PreferNoSchedule}}",
		"reclaim: {criEndpoint: unix:///run/crio/crio.sock, containerGC: false, podLogs: false, imageGC: {enabled: true, minAge: 10m, pinnedImages: [registry.k8s.io/pause:3.10], stateFile: /var/lib/x.json}}\ndryRun: true",
		"evictionHard: {memory.available: -1}",
		"evictionHard: [1]",
		"evictionHrad: {}",
		"evictionHard: {memory.available: 100Mi}\nevictionHard: {memory.available: 100Mi}",
	} {
		f.Add([]byte(header + seed))
	}
	f.Add([]byte("not: [valid"))
	f.Add([]byte("{}"))
	// The hostile corpus (testdata/hostile), small inputs only: the
	// generated megabyte ones would slow every fuzzing iteration.
	for _, c := range hostileCorpus(f) {
		if len(c.data) <= 64<<10 {
			f.Add(c.data)
		}
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		cfg, errs := Load(data)
		if errs != nil {
			if cfg != nil || len(errs) == 0 {
				t.Fatalf("Load: config %v with errors %v", cfg != nil, errs)
			}
			if len(errs) > maxReportedErrors+1 {
				t.Fatalf("%d errors, want at most %d", len(errs), maxReportedErrors+1)
			}
			for _, e := range errs {
				if e.path() == "" || e.Rule == "" {
					t.Fatalf("error without field or rule: %+v", e)
				}
				if n := len(e.Error()); n > 2*maxValueText+len(e.path())+len(e.Rule)+40 {
					t.Fatalf("error of %d bytes: the value is not shortened: %.300s", n, e.Error())
				}
			}
			return
		}
		checkCompiled(t, cfg, data)
		normalized, err := cfg.MarshalYAML()
		if err != nil {
			t.Fatalf("MarshalYAML: %v", err)
		}
		again, errs := Load(normalized)
		if errs != nil {
			t.Fatalf("normalized YAML does not load:\n%s\nerrors: %v\ninput: %q", normalized, errs, data)
		}
		if diff := cmp.Diff(cfg, again, configComparison...); diff != "" {
			t.Fatalf("config from normalized YAML differs (-first +again):\n%s\ninput: %q", diff, data)
		}
		renormalized, _ := again.MarshalYAML()
		if string(renormalized) != string(normalized) {
			t.Fatalf("normalizing is not idempotent:\n%s\n---\n%s", normalized, renormalized)
		}
	})
}

// checkCompiled: what validation promises of an accepted configuration. No
// value it holds is NaN or infinite, no count or rate is zero, no exclusion
// matches every pod, every excluded namespace is a namespace name, the state
// file is a clean absolute path, and no soft threshold sits at or below the
// hard one of its signal.
func checkCompiled(t *testing.T, cfg *Config, data []byte) {
	t.Helper()
	if pm := cfg.RateLimits.PerMinute; math.IsNaN(pm) || math.IsInf(pm, 0) || pm <= 0 {
		t.Fatalf("accepted perMinute %v: %q", pm, data)
	}
	if cfg.RateLimits.MaxPerPass < 1 || cfg.RateLimits.Burst < 1 || cfg.Escalation.MaxCandidates < 1 || cfg.Escalation.SoftMaxCandidates < 1 {
		t.Fatalf("accepted a zero count: %+v %+v: %q", cfg.RateLimits, cfg.Escalation, data)
	}
	if sf := cfg.Brake.SafetyFactor; math.IsNaN(sf) || sf < 1 || sf > 10 {
		t.Fatalf("accepted safetyFactor %v: %q", sf, data)
	}
	if s := cfg.Exclusions.PodSelector; s != nil && s.Empty() {
		t.Fatalf("accepted an empty podSelector: %q", data)
	}
	for ns := range cfg.Exclusions.Namespaces {
		if len(validation.IsDNS1123Label(ns)) > 0 {
			t.Fatalf("accepted namespace %q: %q", ns, data)
		}
	}
	if p := cfg.Reclaim.ImageStateFile; filepath.Clean(p) != p || !filepath.IsAbs(p) {
		t.Fatalf("accepted stateFile %q: %q", p, data)
	}
	for _, s := range cfg.Thresholds {
		if s.Hard() || s.DerivedFrom != "" {
			continue
		}
		for _, h := range cfg.Thresholds {
			if h.Hard() && h.DerivedFrom == "" && h.Signal == s.Signal && s.Value.Quantity != nil && h.Value.Quantity != nil && s.Value.Quantity.Cmp(*h.Value.Quantity) <= 0 {
				if !slices.ContainsFunc(cfg.Warnings, func(w string) bool { return strings.HasPrefix(w, "evictionSoft["+string(s.Signal)+"]") }) {
					t.Fatalf("accepted soft %s %s at or below hard %s without a warning: %q", s.Signal, s.Raw, h.Raw, data)
				}
			}
		}
		if s.GracePeriod > maxSoftGracePeriod {
			t.Fatalf("accepted grace period %v: %q", s.GracePeriod, data)
		}
	}
}

// configComparison compares compiled configurations by meaning: quantities
// by value, selectors by their text, empty and nil slices alike; the
// normalized document is compared separately as YAML, and the warnings are
// not compared (they describe the input as written: a default made explicit
// by normalizing is no longer "the default").
var configComparison = []cmp.Option{
	cmp.Comparer(func(a, b resource.Quantity) bool { return a.Cmp(b) == 0 }),
	cmp.Comparer(func(a, b labels.Selector) bool {
		if a == nil || b == nil {
			return a == nil && b == nil
		}
		return a.String() == b.String()
	}),
	cmpopts.EquateEmpty(),
	cmpopts.IgnoreFields(Config{}, "Normalized", "Warnings"),
}
