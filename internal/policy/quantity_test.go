package policy

import (
	"strings"
	"testing"
)

func TestParseQuantity(t *testing.T) {
	for _, tc := range []struct {
		in      string
		want    int64
		wantErr string
	}{
		{in: "500Mi", want: 500 << 20},
		{in: "1e3", want: 1000},
		{in: "1E3", want: 1000},
		{in: "2E", want: 2e18},
		{in: "1Ei", want: 1 << 60},
		{in: "5e-3", want: 1}, // rounded up to the unit, as apimachinery does
		{in: "1e64"},
		// The forms that spin in apimachinery: refused before it sees them.
		{in: "1E000040000000000000000", wantErr: "exponent 000040000000000000000: the exponent of a quantity must be within ±64"},
		{in: "2E6024865272343", wantErr: "within ±64"},
		{in: "1.5e-2147483647", wantErr: "within ±64"},
		{in: "1e99999999999999999999999", wantErr: "within ±64"},
		{in: "1e65", wantErr: "within ±64"},
		{in: "1e", wantErr: "unable to parse"},
		{in: "abc", wantErr: "quantities must match"},
	} {
		q, err := ParseQuantity(tc.in)
		switch {
		case tc.wantErr != "":
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("ParseQuantity(%q) error = %v, want one containing %q", tc.in, err, tc.wantErr)
			}
		case err != nil:
			t.Errorf("ParseQuantity(%q): %v", tc.in, err)
		case tc.want != 0 && q.Value() != tc.want:
			t.Errorf("ParseQuantity(%q) = %d, want %d", tc.in, q.Value(), tc.want)
		}
	}
}
