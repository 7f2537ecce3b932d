package simulate

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite the golden files under testdata/ from the current output")

// TestExamples_Golden plays every scenario in examples/ and compares its JSON
// and text output with the goldens in testdata/. Regenerate with
// go test ./internal/simulate -run TestExamples_Golden -update, and review the diff.
func TestExamples_Golden(t *testing.T) {
	files, err := filepath.Glob("../../examples/*.yaml")
	if err != nil || len(files) == 0 {
		t.Fatalf("no examples found under examples/ (%v)", err)
	}
	seen := map[string]bool{}
	for _, file := range files {
		name := strings.TrimSuffix(filepath.Base(file), ".yaml")
		seen[name+".json"], seen[name+".txt"] = true, true
		t.Run(name, func(t *testing.T) {
			data, err := os.ReadFile(file)
			if err != nil {
				t.Fatal(err)
			}
			sc, cfg, err := Decode(data)
			if err != nil {
				t.Fatalf("decoding %s:\n%v", file, err)
			}
			res, err := Run(sc, cfg)
			if err != nil {
				t.Fatalf("running %s:\n%v", file, err)
			}
			var js bytes.Buffer
			enc := json.NewEncoder(&js)
			enc.SetIndent("", "  ")
			enc.SetEscapeHTML(false)
			if err := enc.Encode(res); err != nil {
				t.Fatal(err)
			}
			var text bytes.Buffer
			WriteText(&text, res)
			compareGolden(t, filepath.Join("testdata", name+".json"), js.Bytes())
			compareGolden(t, filepath.Join("testdata", name+".txt"), text.Bytes())
		})
	}
	// A golden whose example was removed would silently pin nothing.
	goldens, _ := filepath.Glob("testdata/*.json")
	txts, _ := filepath.Glob("testdata/*.txt")
	for _, g := range append(goldens, txts...) {
		if !seen[filepath.Base(g)] && !*update {
			t.Errorf("%s has no example in examples/; delete it", g)
		}
	}
}

func compareGolden(t *testing.T, path string, got []byte) {
	t.Helper()
	if *update {
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("reading golden %s (run with -update to create it): %v", path, err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("%s differs from the output; if the change is intended run with -update and review the diff.\n%s", path, lineDiff(string(want), string(got)))
	}
}

// lineDiff shows the first lines that differ.
func lineDiff(want, got string) string {
	w, g := strings.Split(want, "\n"), strings.Split(got, "\n")
	var b strings.Builder
	shown := 0
	for i := 0; i < len(w) || i < len(g); i++ {
		var wl, gl string
		if i < len(w) {
			wl = w[i]
		}
		if i < len(g) {
			gl = g[i]
		}
		if wl != gl {
			fmt.Fprintf(&b, "line %d:\n  want: %s\n  got:  %s\n", i+1, wl, gl)
			if shown++; shown == 10 {
				break
			}
		}
	}
	return b.String()
}
