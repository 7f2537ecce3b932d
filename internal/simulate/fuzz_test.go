package simulate

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/evictiond/evictiond/internal/policy"
)

// FuzzDecodeScenario feeds arbitrary bytes to Decode and ParseSteps, the
// scenario input of evictiond simulate. Properties: no panic; a refusal is a
// list of errors, each "field: value: rule"; every accepted observation is a
// reading a node can give (0 <= available <= capacity; a PSI stall within
// 0..100 %), so NaN, infinities and overflows never reach the engine; steps
// are in time order.
func FuzzDecodeScenario(f *testing.F) {
	for _, pattern := range []string{"../../examples/*.yaml", "testdata/hostile/*.yaml"} {
		files, err := filepath.Glob(pattern)
		if err != nil || len(files) == 0 {
			f.Fatalf("no seeds %s (%v)", pattern, err)
		}
		for _, file := range files {
			data, err := os.ReadFile(file)
			if err != nil {
				f.Fatal(err)
			}
			f.Add(data)
		}
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		sc, cfg, err := Decode(data)
		if err != nil {
			checkErrors(t, err)
			return
		}
		if cfg == nil {
			t.Fatal("Decode: no error and no configuration")
		}
		steps, err := ParseSteps(sc)
		if err != nil {
			checkErrors(t, err)
			return
		}
		for i, st := range steps {
			if i > 0 && st.At < steps[i-1].At {
				t.Fatalf("step %d at %v before the previous step at %v", i, st.At, steps[i-1].At)
			}
			for sig, o := range st.Input.Observations {
				if o.Available < 0 || o.Capacity < 0 || o.Available > o.Capacity {
					t.Fatalf("step %d: %s available %d, capacity %d accepted from %q", i, sig, o.Available, o.Capacity, data)
				}
				if sig.IsPSI() && o.Capacity != policy.PSIScale {
					t.Fatalf("step %d: %s capacity %d, want %d", i, sig, o.Capacity, policy.PSIScale)
				}
			}
			for step, v := range st.Input.Reclaimable {
				if v < 0 {
					t.Fatalf("step %d: reclaimable %s %d accepted", i, step, v)
				}
			}
		}
	})
}

func checkErrors(t *testing.T, err error) {
	t.Helper()
	errs, ok := err.(Errors)
	if !ok || len(errs) == 0 {
		t.Fatalf("error %T %v: want a non-empty Errors", err, err)
	}
	for _, e := range errs {
		text := e.Error()
		if parts := strings.SplitN(text, ": ", 3); len(parts) < 3 || parts[0] == "" || parts[2] == "" {
			t.Fatalf("error %q: want field: value: rule", text)
		}
	}
}
