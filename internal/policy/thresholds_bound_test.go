package policy

import (
	"strings"
	"testing"
)

func TestBoundThreshold_ParsesOnePercentageAndOneQuantityInEitherOrder(t *testing.T) {
	cases := []struct {
		value string
		bound Bound
		pct   float32
		q     int64
	}{
		{"max(5%,500Mi)", BoundMax, 0.05, 500 * Mi},
		{"max( 500Mi , 5% )", BoundMax, 0.05, 500 * Mi},
		{"min(10%, 4Gi)", BoundMin, 0.10, 4 * Gi},
	}
	for _, tc := range cases {
		v, raw, err := parseThresholdValue(SignalMemoryAvailable, tc.value)
		if err != nil {
			t.Fatalf("%q: %v", tc.value, err)
		}
		if v.Bound != tc.bound || v.Percentage != tc.pct || v.Quantity.Value() != tc.q || raw != tc.value {
			t.Fatalf("%q: got bound %q pct %v quantity %v raw %q", tc.value, v.Bound, v.Percentage, v.Quantity, raw)
		}
		if v.IsQuantity() {
			t.Fatalf("%q: a bounded value reports itself a plain quantity", tc.value)
		}
	}
}

func TestBoundThreshold_ErrorsNameTheRule(t *testing.T) {
	cases := map[string]string{
		"max(5%)":               "max() takes one percentage and one quantity, like max(10%,2Gi): found 1 arguments",
		"max(5%,6%)":            "found two percentages",
		"min(1Gi,2Gi)":          "found two quantities (min() of two quantities is one of them: write it)",
		"max(5%,500Mi":          "the closing parenthesis is missing",
		"max(0%,1Gi)":           `"0%" disables a signal on its own and means nothing inside max()`,
		"max(5%,500Mib)":        `"500Mib": must be a quantity (500Mi) or a percentage (10%)`,
		"max(max(1%,1Gi),2Gi)":  "found 3 arguments",
		"max(5%,-1Gi)":          `"-1Gi": eviction threshold must be positive`,
		"max(5%, 500Mi, 1Gi)":   "found 3 arguments",
		"average(5%,500Mi)":     thresholdFormsRule,
		"max(101%,1Gi)":         "eviction percentage threshold must be <= 100%",
		"max(5%,100Ei)":         "eviction threshold must be at most 8Ei",
		"MAX(5%,500Mi)":         thresholdFormsRule,
		"max(5%,500Mi)extra":    "the closing parenthesis is missing",
		"max(,)":                `"": must not be empty`,
		"min(10%,10%)":          "found two percentages",
		"max(5%,500Mi) ":        "", // trailing blanks trimmed: valid
		" min( 10% , 4Gi ) ":    "",
		"max(5%,1e3)":           "",
		"max(5%,5Gi)":           "",
		"max(33.3%,1G)":         "",
		"max(5%,500Mi)\t":       "",
		"max(5%,500Mi)\n":       "",
		"max(5%,500Mi)\r\n":     "",
		"max(  5%  ,  500Mi  )": "",
	}
	for value, want := range cases {
		_, _, err := parseThresholdValue(SignalMemoryAvailable, value)
		switch {
		case want == "" && err != nil:
			t.Errorf("%q: %v, want it accepted", value, err)
		case want != "" && (err == nil || !strings.Contains(err.Error(), want)):
			t.Errorf("%q: error %v, want it to contain %q", value, err, want)
		}
	}
	if _, _, err := parseThresholdValue(SignalMemoryPSISomeAvg10, "max(40%,1Gi)"); err == nil || !strings.Contains(err.Error(), "pressure stall threshold") {
		t.Errorf("PSI max(): error %v, want the PSI rule", err)
	}
}

// kubernetes#54058: a percentage alone is 51 GiB on a 512 GiB node and 400 MiB
// on a 4 GiB one; the floor and the cap bound it, and Explain says which won.
func TestBoundThreshold_ResolvesToTheWinningSideAndSaysWhich(t *testing.T) {
	floor, _, _ := parseThresholdValue(SignalMemoryAvailable, "max(5%,500Mi)")
	capped, _, _ := parseThresholdValue(SignalMemoryAvailable, "min(10%,4Gi)")
	cases := []struct {
		v        *ThresholdValue
		raw      string
		capacity int64
		want     int64
		explain  string
	}{
		{floor, "max(5%,500Mi)", 4 * Gi, 500 * Mi, "max(5%,500Mi) of 4Gi: 500Mi (the quantity; 5% is 204.8Mi)"},
		{floor, "max(5%,500Mi)", 512 * Gi, int64(float64(512*Gi) * float64(float32(0.05))), "max(5%,500Mi) of 512Gi: 25.6Gi (the percentage, 5%; the quantity is 500Mi)"},
		{capped, "min(10%,4Gi)", 4 * Gi, int64(float64(4*Gi) * float64(float32(0.10))), "min(10%,4Gi) of 4Gi: 409.6Mi (the percentage, 10%; the quantity is 4Gi)"},
		{capped, "min(10%,4Gi)", 512 * Gi, 4 * Gi, "min(10%,4Gi) of 512Gi: 4Gi (the quantity; 10% is 51.2Gi)"},
	}
	for _, tc := range cases {
		if got := tc.v.Resolve(tc.capacity); got != tc.want {
			t.Errorf("%s of %d: %d, want %d", tc.raw, tc.capacity, got, tc.want)
		}
		if got := tc.v.Explain(SignalMemoryAvailable, tc.raw, tc.capacity); got != tc.explain {
			t.Errorf("Explain: %q, want %q", got, tc.explain)
		}
	}
	if got, want := floor.CrossoverText(SignalMemoryAvailable), "the 500Mi floor holds below 9.8Gi of capacity, 5% above"; got != want {
		t.Errorf("CrossoverText: %q, want %q", got, want)
	}
}

func TestBoundThreshold_KubeletFormsUnchangedAndFlagFormSplitsOutsideParentheses(t *testing.T) {
	for _, v := range []string{"500Mi", "10%", "1G", "7.5%"} {
		pv, _, err := parseThresholdValue(SignalMemoryAvailable, v)
		if err != nil || pv.Bound != "" {
			t.Errorf("%q: %v, bound %q; want the kubelet's meaning", v, err, pv.Bound)
		}
	}
	m, errs := ParseFlagForm("memory.available<max(5%,500Mi),nodefs.available<10%,imagefs.available<min(15%, 100Gi)", true)
	if len(errs) != 0 {
		t.Fatal(errs)
	}
	if m["memory.available"] != "max(5%,500Mi)" || m["nodefs.available"] != "10%" || m["imagefs.available"] != "min(15%, 100Gi)" {
		t.Fatalf("flag form: %v", m)
	}
}

// A bounded threshold acts where the plain percentage would not: 450Mi free
// on a 4Gi node is above 5% (204.8Mi) but below the 500Mi floor.
func TestBoundThreshold_MetOnTheFloorAndValidateNotesTheCrossover(t *testing.T) {
	cfg := mustLoad(t, `evictionHard: {memory.available: "max(5%, 500Mi)"}`)
	obs := Observations{SignalMemoryAvailable: {Available: 450 * Mi, Capacity: 4 * Gi}}
	met := thresholdsMet(cfg.Thresholds, obs, false)
	if len(met) == 0 || met[0].Signal != SignalMemoryAvailable {
		t.Fatalf("thresholds met %v, want memory.available (450Mi < the 500Mi floor)", met)
	}
	if len(cfg.Notes) != 1 || !strings.Contains(cfg.Notes[0], "the 500Mi floor holds below 9.8Gi of capacity, 5% above (500Mi on 4Gi, 3.2Gi on 64Gi, 25.6Gi on 512Gi)") {
		t.Fatalf("notes %q", cfg.Notes)
	}
	// Derived allocatableMemory.available carries the same bound.
	for _, th := range cfg.Thresholds {
		if th.Signal == SignalAllocatableMemoryAvailable && th.Value.Bound != BoundMax {
			t.Fatalf("derived %s lost the bound: %+v", th.Signal, th.Value)
		}
	}
}
