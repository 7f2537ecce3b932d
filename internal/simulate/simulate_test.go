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

func runScenario(t *testing.T, yaml string) *Result {
	t.Helper()
	sc, cfg, err := Decode([]byte(yaml))
	if err != nil {
		t.Fatalf("decoding: %v", err)
	}
	res, err := Run(sc, cfg)
	if err != nil {
		t.Fatalf("running: %v", err)
	}
	return res
}

// Under hard pressure the escalation must not depend on there being at
// least maxCandidates eligible pods: when every candidate refused, escalate.
func TestRun_HardPressureEscalatesWhenFewerCandidatesThanMax(t *testing.T) {
	res := runScenario(t, `
config:
  evictionHard: {memory.available: 500Mi}
  enforceNodeAllocatable: []
  eviction: {pdbEscalation: {maxCandidates: 3}}
node: {name: node-1}
pods:
  - metadata: {name: a, namespace: x, uid: a}
    spec: {containers: [{name: c}]}
  - metadata: {name: b, namespace: x, uid: b}
    spec: {containers: [{name: c}]}
steps:
  - at: 0s
    observations: {memory.available: {available: 100Mi, capacity: 8Gi}}
    podStats: {a: {memoryWorkingSet: 2Gi}, b: {memoryWorkingSet: 1Gi}}
    evictionRefused: [a, b]
`)
	s := res.Steps[0]
	if len(s.Refused) != 2 || s.Eviction == nil || s.Eviction.Pod != "x/a" || !strings.HasPrefix(s.Eviction.Reason, "deleted directly: 2 candidates refused") {
		t.Fatalf("refused %d, eviction %+v; want both refused and x/a deleted directly", len(s.Refused), s.Eviction)
	}
}

// Under soft pressure nothing is forced; when every candidate refuses, the
// step says so.
func TestRun_SoftPressureAllRefusedIsExplained(t *testing.T) {
	res := runScenario(t, `
config:
  evictionHard: {}
  evictionSoft: {memory.available: 500Mi}
  evictionSoftGracePeriod: {memory.available: 1s}
  enforceNodeAllocatable: []
node: {name: node-1}
pods:
  - metadata: {name: a, namespace: x, uid: a}
    spec: {containers: [{name: c}]}
steps:
  - at: 0s
    observations: {memory.available: {available: 100Mi, capacity: 8Gi}}
    podStats: {a: {memoryWorkingSet: 2Gi}}
  - at: 1s
    observations: {memory.available: {available: 100Mi, capacity: 8Gi}}
    evictionRefused: [a]
`)
	s := res.Steps[1]
	want := "every candidate (1) refused by PodDisruptionBudgets under soft pressure; nothing is forced"
	if s.Eviction != nil || len(s.Refused) != 1 || len(s.Notes) != 1 || s.Notes[0] != want {
		t.Fatalf("eviction %+v, refused %d, notes %q; want no eviction and note %q", s.Eviction, len(s.Refused), s.Notes, want)
	}
}

// Local-storage limit violations take the pass even when a threshold is
// met; several violators go in one pass, up to eviction.rateLimits.maxPerPass.
func TestRun_LocalStorageEvictionsFirst(t *testing.T) {
	res := runScenario(t, `
config:
  evictionHard: {nodefs.available: 10%}
  eviction: {rateLimits: {maxPerPass: 2}}
node: {name: node-1}
pods:
  - metadata: {name: a, namespace: x, uid: a}
    spec: {volumes: [{name: v, emptyDir: {sizeLimit: 1Gi}}], containers: [{name: c}]}
  - metadata: {name: b, namespace: x, uid: b}
    spec: {volumes: [{name: v, emptyDir: {sizeLimit: 1Gi}}], containers: [{name: c}]}
  - metadata: {name: c, namespace: x, uid: c}
    spec: {volumes: [{name: v, emptyDir: {sizeLimit: 1Gi}}], containers: [{name: c}]}
  - metadata: {name: big, namespace: x, uid: big}
    spec: {containers: [{name: c}]}
steps:
  - at: 0s
    observations: {nodefs.available: {available: 5Gi, capacity: 100Gi}}
    podStats:
      a: {volumes: {v: 2Gi}}
      b: {volumes: {v: 2Gi}}
      c: {volumes: {v: 2Gi}}
      big: {containers: {c: {rootfs: 50Gi}}}
`)
	s := res.Steps[0]
	if s.Eviction != nil || len(s.LocalStorage) != 2 || s.LocalStorage[0].Pod != "x/a" || s.LocalStorage[1].Pod != "x/b" {
		t.Fatalf("eviction %+v, local-storage %+v; want a and b only", s.Eviction, s.LocalStorage)
	}
	if len(s.Notes) != 2 || !strings.HasPrefix(s.Notes[0], "1 more local-storage violations wait") {
		t.Fatalf("notes %q", s.Notes)
	}
}

// Quantities may be YAML numbers, as in the configuration; a value of the
// wrong kind is named with its field and the rule.
func TestDecode_QuantitiesAsNumbersAndWrongValuesNamed(t *testing.T) {
	res := runScenario(t, `
config:
  evictionHard: {pid.available: 100}
node: {name: node-1}
pods:
  - metadata: {name: a, namespace: x, uid: a}
    spec: {containers: [{name: c}]}
steps:
  - at: 0
    observations: {pid.available: {available: 50, capacity: 4096}}
    podStats: {a: {memoryWorkingSet: 2147483648, processes: 40, containers: {c: {logs: 0, rootfs: 1024}}}}
`)
	if e := res.Steps[0].Eviction; e == nil || e.Pod != "x/a" {
		t.Fatalf("eviction %+v; want x/a evicted for pid.available 50 < 100", e)
	}
	sc, cfg, err := Decode([]byte(`
node: {name: node-1}
steps:
  - at: 0s
    observations: {memory.available: {available: {gi: 1}, capacity: 8Gi}}
`))
	if err != nil {
		t.Fatalf("decoding: %v", err)
	}
	_, err = Run(sc, cfg)
	want := `steps[0].observations[memory.available].available: "{\"gi\":1}": must be a quantity like 500Mi`
	if err == nil || err.Error() != want {
		t.Fatalf("err = %v, want %s", err, want)
	}
}
