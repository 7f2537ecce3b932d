package main

import (
	"bytes"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite the golden files under testdata/")

// run calls the command line as main does and returns exit code, stdout, stderr.
func run(args ...string) (int, string, string) {
	var stdout, stderr bytes.Buffer
	code := dispatch(args, &stdout, &stderr)
	return code, stdout.String(), stderr.String()
}

func golden(t *testing.T, path, got string) {
	t.Helper()
	if *update {
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("reading golden %s (run with -update to create it): %v", path, err)
	}
	if got != string(want) {
		t.Fatalf("output differs from %s:\n--- got\n%s\n--- want\n%s", path, got, want)
	}
}

func TestValidate_ValidConfigExits0WithNormalizedYAML(t *testing.T) {
	code, stdout, stderr := run("validate", "-f", "testdata/valid.yaml")
	if code != 0 || stderr != "" {
		t.Fatalf("exit %d, stderr %q", code, stderr)
	}
	golden(t, "testdata/valid.normalized.yaml", stdout)

	// The normalized form is itself valid and normalizes to itself.
	tmp := filepath.Join(t.TempDir(), "normalized.yaml")
	if err := os.WriteFile(tmp, []byte(stdout), 0o644); err != nil {
		t.Fatal(err)
	}
	code, again, stderr := run("validate", "-f", tmp)
	if code != 0 || again != stdout {
		t.Fatalf("validating the normalized output: exit %d, stderr %q, output changed: %v", code, stderr, again != stdout)
	}
}

func TestValidate_WarningsGoToStderrAndExit0(t *testing.T) {
	tmp := filepath.Join(t.TempDir(), "c.yaml")
	os.WriteFile(tmp, []byte("apiVersion: evictiond.io/v1alpha1\nkind: EvictionConfiguration\nevictionHard: {containerfs.available: 10%}\n"), 0o644)
	code, stdout, stderr := run("validate", "-f", tmp)
	if code != 0 || !strings.HasPrefix(stderr, "warning: evictionHard[containerfs.available] ignored: ") || stdout == "" {
		t.Fatalf("exit %d, stderr %q, stdout empty %v", code, stderr, stdout == "")
	}
}

func TestValidate_InvalidConfigExits1OneLinePerProblem(t *testing.T) {
	code, stdout, stderr := run("validate", "-f", "testdata/invalid.yaml")
	if code != 1 || stdout != "" {
		t.Fatalf("exit %d, stdout %q", code, stdout)
	}
	want := []string{
		`evictionHard[memory.available]: "memory.available<1Gi": duplicate signal: each signal may appear once`,
		`evictionSoft[memory.free]: "1Gi": unsupported eviction signal; one of `,
		`evictionSoftGracePeriod[nodefs.available]: "soon": must be a duration like 1m30s`,
		`evictionHard[memory.available]: "-500Mi": eviction threshold must be positive`,
		`evictionHard[nodefs.available]: "110%": eviction percentage threshold must be <= 100%`,
		`loop.interval: "fast": must be a duration like 30s, 1m30s or 500ms`,
	}
	lines := strings.Split(strings.TrimSuffix(stderr, "\n"), "\n")
	if len(lines) != len(want) {
		t.Fatalf("%d lines, want %d:\n%s", len(lines), len(want), stderr)
	}
	for i := range want {
		if !strings.HasPrefix(lines[i], want[i]) {
			t.Errorf("line %d:\n%s\nwant prefix:\n%s", i+1, lines[i], want[i])
		}
	}
}

func TestValidate_UsageErrors(t *testing.T) {
	cases := []struct {
		args   []string
		code   int
		stderr string
	}{
		{[]string{"validate"}, 2, "validate: -f FILE is required\n"},
		{[]string{"validate", "-x"}, 2, "flag provided but not defined: -x"},
		{[]string{"validate", "-f", "testdata/does-not-exist.yaml"}, 1, "validate: reading testdata/does-not-exist.yaml: open testdata/does-not-exist.yaml: no such file or directory\n"},
		{[]string{"frobnicate"}, 2, `evictiond: unknown command "frobnicate"`},
		{nil, 2, "evictiond — node-pressure eviction"},
	}
	for _, tc := range cases {
		code, _, stderr := run(tc.args...)
		if code != tc.code || !strings.HasPrefix(stderr, tc.stderr) {
			t.Errorf("%v: exit %d stderr %q; want exit %d, stderr starting %q", tc.args, code, stderr, tc.code, tc.stderr)
		}
	}
	if code, stdout, _ := run("help"); code != 0 || !strings.Contains(stdout, "evictiond simulate -f SCENARIO") {
		t.Errorf("help: exit %d", code)
	}
}

// simulate prints exactly what the simulate package's goldens pin.
func TestSimulate_ExamplesMatchGoldens(t *testing.T) {
	files, _ := filepath.Glob("../../examples/*.yaml")
	if len(files) == 0 {
		t.Fatal("no examples under examples/")
	}
	for _, file := range files {
		name := strings.TrimSuffix(filepath.Base(file), ".yaml")
		for _, format := range []string{"json", "text"} {
			code, stdout, stderr := run("simulate", "-f", file, "-o", format)
			if code != 0 || stderr != "" {
				t.Fatalf("%s -o %s: exit %d stderr %q", name, format, code, stderr)
			}
			ext := map[string]string{"json": ".json", "text": ".txt"}[format]
			want, err := os.ReadFile(filepath.Join("../../internal/simulate/testdata", name+ext))
			if err != nil {
				t.Fatal(err)
			}
			if stdout != string(want) {
				t.Errorf("%s -o %s differs from internal/simulate/testdata/%s%s", name, format, name, ext)
			}
		}
	}
}

func TestSimulate_BadScenarioExits1OneLinePerProblem(t *testing.T) {
	tmp := filepath.Join(t.TempDir(), "s.yaml")
	os.WriteFile(tmp, []byte(`
config: {evictionHard: {memory.available: 0}, evictionSoft: {nodefs.available: 10%}}
node: {name: node-1}
pods: []
steps: []
`), 0o644)
	code, stdout, stderr := run("simulate", "-f", tmp)
	want := `config.evictionHard[memory.available]: "0": eviction threshold must be positive
config.evictionSoft[nodefs.available]: "10%": grace period must be specified for the soft eviction threshold in evictionSoftGracePeriod
`
	if code != 1 || stdout != "" || stderr != want {
		t.Fatalf("exit %d stdout %q stderr:\n%s\nwant:\n%s", code, stdout, stderr, want)
	}

	os.WriteFile(tmp, []byte(`
node: {name: node-1}
pods: []
steps:
  - at: 10s
    observations: {memory.available: {available: 9Gi, capacity: 8Gi}}
  - at: 5s
  - at: soon
`), 0o644)
	code, _, stderr = run("simulate", "-f", tmp)
	want = `steps[0].observations[memory.available].available: "9Gi": must not exceed capacity 8Gi
steps[1].at: "5s": steps must be in time order
steps[2].at: "soon": must be a duration like 0s or 1m30s
`
	if code != 1 || stderr != want {
		t.Fatalf("exit %d stderr:\n%s\nwant:\n%s", code, stderr, want)
	}
}

func TestSimulate_UsageErrors(t *testing.T) {
	if code, _, stderr := run("simulate", "-f", "../../examples/pid-pressure.yaml", "-o", "yaml"); code != 2 || stderr != "simulate: -o \"yaml\": must be json or text\n" {
		t.Errorf("-o yaml: exit %d stderr %q", code, stderr)
	}
	if code, _, stderr := run("simulate"); code != 2 || stderr != "simulate: one of -f SCENARIO or --trace FILE is required\n" {
		t.Errorf("no -f: exit %d stderr %q", code, stderr)
	}
}
