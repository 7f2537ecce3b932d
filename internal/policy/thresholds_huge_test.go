package policy

import (
	"strings"
	"testing"
)

// Quantities with huge exponents must be judged at once: exact big.Int
// arithmetic on them never returns, and apimachinery's own parse of some of
// them spins (found by FuzzParseThresholds).
func TestHugeExponentQuantitiesAreRejectedPromptly(t *testing.T) {
	for _, tc := range []struct{ field, yaml, want string }{
		{"evictionHard", "evictionHard: {pid.available: 1E10000000002000}\n", "the exponent of a quantity must be within ±64"},
		{"evictionHard", "evictionHard: {memory.available: 1E000040000000000000000}\n", "the exponent of a quantity must be within ±64"},
		{"evictionMinimumReclaim", "evictionMinimumReclaim: {pid.available: 7E10000000002000}\n", "the exponent of a quantity must be within ±64"},
	} {
		_, errs := Load([]byte("apiVersion: evictiond.io/v1alpha1\nkind: EvictionConfiguration\n" + tc.yaml))
		if errs == nil || !strings.Contains(errs.Error(), tc.want) || !strings.Contains(errs.Error(), tc.field) {
			t.Errorf("%s: errors %v, want one naming the field and %q", tc.field, errs, tc.want)
		}
	}
	// Zero with a huge exponent is refused too (its float approximation is
	// NaN), rather than risk exact arithmetic on it later.
	_, errs := Load([]byte("apiVersion: evictiond.io/v1alpha1\nkind: EvictionConfiguration\nevictionHard: {pid.available: \"100\"}\nevictionMinimumReclaim: {pid.available: E10000000002000}\n"))
	if errs == nil {
		t.Fatal("zero with a huge exponent accepted as a minimum reclaim")
	}
}
