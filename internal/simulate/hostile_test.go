package simulate

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestDecode_HostileScenarios: every hostile scenario under testdata/hostile is
// refused before it runs, with an error containing the file's "# want:"
// fragment (the field, the value and the rule). A NaN stall used to become a
// stall of -9.2e16 % and evict.
func TestDecode_HostileScenarios(t *testing.T) {
	files, err := filepath.Glob("testdata/hostile/*.yaml")
	if err != nil || len(files) == 0 {
		t.Fatalf("no hostile scenarios (%v)", err)
	}
	for _, f := range files {
		t.Run(strings.TrimSuffix(filepath.Base(f), ".yaml"), func(t *testing.T) {
			data, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			want, ok := strings.CutPrefix(strings.SplitN(string(data), "\n", 2)[0], "# want: ")
			if !ok {
				t.Fatalf("%s: no # want: line", f)
			}
			sc, _, err := Decode(data)
			if err == nil {
				_, err = ParseSteps(sc)
			}
			if err == nil {
				t.Fatalf("accepted; want refused with %q", want)
			}
			if !strings.Contains(err.Error(), want) {
				t.Fatalf("error:\n%v\nwant one containing %q", err, want)
			}
		})
	}
}
