package monitor

import (
	"testing"

	"github.com/evictiond/evictiond/internal/policy"
)

func TestParsePSIRejectsWhatIsNotAStallPercentage(t *testing.T) {
	for _, raw := range []string{
		"",
		"full avg10=1.00 avg60=0.00 avg300=0.00 total=0\n",
		"some avg10=abc avg60=0.00 avg300=0.00 total=0\n",
		"some avg10=-1 avg60=0.00 avg300=0.00 total=0\n",
		"some avg10=NaN avg60=0.00 avg300=0.00 total=0\n",
		"some avg10 avg60=0.00\n",
	} {
		if r, err := parsePSI("memory.pressure", []byte(raw)); err == nil {
			t.Errorf("%q parsed as %+v", raw, r)
		}
	}
}

// FuzzParsePSI: whatever a pressure file holds, parsing never panics, and
// what it accepts gives headroom within [0, PSIScale].
func FuzzParsePSI(f *testing.F) {
	f.Add([]byte("some avg10=12.50 avg60=3.10 avg300=0.75 total=123456\nfull avg10=4.00 avg60=1.00 avg300=0.20 total=2345\n"))
	f.Add([]byte("some avg10=0.00 avg60=0.00 avg300=0.00 total=0\n"))
	f.Add([]byte("some avg10=100.00 avg60=99.99 avg300=1e2 total=1\n"))
	f.Fuzz(func(t *testing.T, raw []byte) {
		r, err := parsePSI("memory.pressure", raw)
		if err != nil {
			return
		}
		for sig, stall := range r.values(allocatablePSISignals) {
			h := psiHeadroom(stall)
			if h < 0 || h > policy.PSIScale {
				t.Fatalf("%s: stall %v gave headroom %d", sig, stall, h)
			}
		}
	})
}
