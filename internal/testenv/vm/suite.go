package vm

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// Suite is one Go test binary run in the guest.
type Suite struct {
	// Name names the suite on the host (the top-level subtest) and its binary.
	Name string
	// Package is the Go package to build with `go test -c`, e.g. ./internal/notify.
	Package string
	// Tags are the build tags.
	Tags string
	// Run selects the tests (-test.run); every test it lists on the host
	// (-test.list) must report a result from the guest. Empty: no tests.
	Run string
	// Bench selects benchmarks (-test.bench), Benchtime their -test.benchtime.
	Bench, Benchtime string
	// Timeout is the binary's -test.timeout in the guest. Default 5m.
	Timeout time.Duration
	// Env is extra environment for the binary ("KEY=value").
	Env []string

	binary string
	tests  []string
}

// Event is one `go test -json` event (cmd/test2json).
type Event struct {
	Time    time.Time
	Action  string
	Package string
	Test    string
	Elapsed float64
	Output  string
}

const suiteMarker = "EVICTIOND-VM-SUITE"

// BuildSuites builds each suite's test binary, static (CGO_ENABLED=0), from
// the module at moduleDir into dir, and lists the tests each one must report.
func BuildSuites(ctx context.Context, moduleDir, dir string, suites []*Suite) error {
	goBin, err := exec.LookPath("go")
	if err != nil {
		return fmt.Errorf("vm: the go command is needed to build the guest's test binaries: %w", err)
	}
	for _, s := range suites {
		s.binary = filepath.Join(dir, s.Name+".test")
		args := []string{"test", "-c", "-trimpath", "-ldflags=-s -w", "-o", s.binary}
		if s.Tags != "" {
			args = append(args, "-tags", s.Tags)
		}
		cmd := exec.CommandContext(ctx, goBin, append(args, s.Package)...)
		cmd.Dir = moduleDir
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH=amd64")
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("vm: building suite %s (go %s): %w\n%s", s.Name, strings.Join(append(args, s.Package), " "), err, out)
		}
		if s.Run == "" {
			continue
		}
		out, err := exec.CommandContext(ctx, s.binary, "-test.list", s.Run).Output()
		if err != nil {
			return fmt.Errorf("vm: listing the tests of suite %s (%s -test.list %q): %w", s.Name, s.binary, s.Run, err)
		}
		for _, line := range strings.Split(string(out), "\n") {
			if strings.HasPrefix(line, "Test") || strings.HasPrefix(line, "Example") {
				s.tests = append(s.tests, line)
			}
		}
		if len(s.tests) == 0 {
			return fmt.Errorf("vm: suite %s: -test.run %q selects no test in %s", s.Name, s.Run, s.Package)
		}
	}
	return nil
}

// Files returns the guest files of the suites (their binaries in /tests).
func Files(suites []*Suite) map[string]File {
	files := map[string]File{}
	for _, s := range suites {
		files["/tests/"+s.Name+".test"] = File{Source: s.binary}
	}
	return files
}

// Script is the guest script that runs every suite in turn, each between
// begin and end markers, with -test.v=test2json so the host can convert its
// output to events exactly as `go test -json` does.
func Script(suites []*Suite) string {
	var b strings.Builder
	b.WriteString("status=0\n")
	for _, s := range suites {
		timeout := s.Timeout
		if timeout == 0 {
			timeout = 5 * time.Minute
		}
		args := []string{"-test.v=test2json", "-test.count=1", "-test.timeout=" + timeout.String()}
		run := s.Run
		if run == "" {
			run = "^$"
		}
		args = append(args, "-test.run="+shellQuote(run))
		if s.Bench != "" {
			args = append(args, "-test.bench="+shellQuote(s.Bench), "-test.benchmem")
			if s.Benchtime != "" {
				args = append(args, "-test.benchtime="+s.Benchtime)
			}
		}
		env := ""
		for _, e := range s.Env {
			env += shellQuote(e) + " "
		}
		fmt.Fprintf(&b, "mkdir -p /root/%[1]s && cd /root/%[1]s\n", s.Name)
		fmt.Fprintf(&b, "echo %s-BEGIN %s\n", suiteMarker, s.Name)
		fmt.Fprintf(&b, "env %s/tests/%s.test %s\n", env, s.Name, strings.Join(args, " "))
		fmt.Fprintf(&b, "rc=$?; echo; echo %s-END %s $rc; [ $rc -eq 0 ] || status=1\n", suiteMarker, s.Name)
	}
	b.WriteString("exit $status\n")
	return b.String()
}

func shellQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }

var suiteLine = regexp.MustCompile(`^` + suiteMarker + `-(BEGIN|END) (\S+)(?: (\d+))?$`)

// SuiteResult is one suite's output from a run.
type SuiteResult struct {
	Events []Event
	// ExitStatus of the binary; -1 when its end marker is missing.
	ExitStatus int
}

// ParseSuites splits the guest's output by suite and converts each part with
// `go tool test2json`.
func ParseSuites(ctx context.Context, output []byte, suites []*Suite) (map[string]*SuiteResult, error) {
	sections := map[string]*bytes.Buffer{}
	results := map[string]*SuiteResult{}
	var current *bytes.Buffer
	sc := bufio.NewScanner(bytes.NewReader(output))
	sc.Buffer(make([]byte, 64<<10), 16<<20)
	for sc.Scan() {
		line := sc.Text()
		// The marker may follow output without a final newline on the same line.
		if i := strings.Index(line, suiteMarker+"-"); i >= 0 {
			if m := suiteLine.FindStringSubmatch(line[i:]); m != nil {
				if i > 0 && current != nil {
					current.WriteString(line[:i] + "\n")
				}
				switch m[1] {
				case "BEGIN":
					current = &bytes.Buffer{}
					sections[m[2]] = current
					results[m[2]] = &SuiteResult{ExitStatus: -1}
				case "END":
					if r := results[m[2]]; r != nil {
						r.ExitStatus, _ = strconv.Atoi(m[3])
					}
					current = nil
				}
				continue
			}
		}
		if current != nil {
			current.WriteString(line + "\n")
		}
	}
	for _, s := range suites {
		sec, ok := sections[s.Name]
		if !ok {
			continue
		}
		cmd := exec.CommandContext(ctx, "go", "tool", "test2json", "-t", "-p", s.Name)
		cmd.Stdin = sec
		out, err := cmd.Output()
		if err != nil {
			return nil, fmt.Errorf("vm: go tool test2json over suite %s: %w", s.Name, err)
		}
		dec := json.NewDecoder(bytes.NewReader(out))
		for dec.More() {
			var ev Event
			if err := dec.Decode(&ev); err != nil {
				return nil, fmt.Errorf("vm: decoding test2json output of suite %s: %w", s.Name, err)
			}
			results[s.Name].Events = append(results[s.Name].Events, ev)
		}
	}
	return results, nil
}

// testNode is one test or subtest of the guest, with what it printed.
type testNode struct {
	name     string
	action   string // pass, fail, skip; empty: no result
	elapsed  float64
	output   []string
	children []*testNode
	byName   map[string]*testNode
}

func (n *testNode) child(name string) *testNode {
	if n.byName == nil {
		n.byName = map[string]*testNode{}
	}
	if c, ok := n.byName[name]; ok {
		return c
	}
	c := &testNode{name: name}
	n.byName[name] = c
	n.children = append(n.children, c)
	return c
}

// Mirror reports a suite's guest results as subtests of t: one subtest per
// guest test (and per guest subtest), failing when the guest's failed, was
// skipped (a skip is not a pass here) or never reported. Benchmark results
// are logged on t.
func Mirror(t *testing.T, s *Suite, r *SuiteResult) {
	t.Helper()
	if r == nil {
		t.Errorf("suite %s: no output from the guest (it did not start, or the VM stopped before it)", s.Name)
		return
	}
	root := &testNode{}
	var suiteOutput []string
	for _, ev := range r.Events {
		if ev.Test == "" {
			if ev.Action == "output" {
				suiteOutput = append(suiteOutput, strings.TrimRight(ev.Output, "\n"))
			}
			continue
		}
		n := root
		for _, part := range strings.Split(ev.Test, "/") {
			n = n.child(part)
		}
		switch ev.Action {
		case "output":
			n.output = append(n.output, strings.TrimRight(ev.Output, "\n"))
		case "pass", "fail", "skip":
			n.action, n.elapsed = ev.Action, ev.Elapsed
		}
	}
	for _, name := range s.tests {
		if _, ok := root.byName[name]; !ok {
			t.Errorf("suite %s: guest test %s reported no result (the binary exited %d before it ran?)", s.Name, name, r.ExitStatus)
		}
	}
	var c counts
	for _, n := range root.children {
		mirror(t, n, &c)
	}
	t.Logf("suite %s: %d guest tests and subtests passed, %d did not (of %d expected top-level tests)", s.Name, c.passed, c.failed, len(s.tests))
	for _, line := range suiteOutput {
		if strings.HasPrefix(line, "Benchmark") || strings.HasPrefix(line, "goos:") || strings.HasPrefix(line, "cpu:") {
			t.Logf("guest %s: %s", s.Name, line)
		}
	}
	if r.ExitStatus != 0 {
		t.Errorf("suite %s: the guest's test binary exited %d; its output without a test:\n%s", s.Name, r.ExitStatus, strings.Join(lastN(suiteOutput, 40), "\n"))
	}
}

// mirror reports n as a subtest; the guest's output of a test is logged
// only when it did not pass (it is in the VM's output file either way).
func mirror(t *testing.T, n *testNode, c *counts) {
	t.Run(n.name, func(t *testing.T) {
		for _, child := range n.children {
			mirror(t, child, c)
		}
		if n.action != "pass" {
			for _, line := range n.output {
				if trimmed := strings.TrimSpace(line); strings.HasPrefix(trimmed, "=== ") || strings.HasPrefix(trimmed, "--- ") {
					continue // the guest's own framing; the host prints its own
				}
				t.Log(line)
			}
		}
		switch n.action {
		case "pass":
			c.passed++
			t.Logf("passed in the guest in %.2fs", n.elapsed)
		case "fail":
			c.failed++
			t.Errorf("failed in the guest (%.2fs)", n.elapsed)
		case "skip":
			c.failed++
			t.Errorf("skipped in the guest: this tier counts a skip as a failure")
		default:
			c.failed++
			t.Errorf("no result from the guest (the binary died or timed out while it ran)")
		}
	})
}

type counts struct{ passed, failed int }

func lastN(lines []string, n int) []string {
	if len(lines) > n {
		return slices.Clone(lines[len(lines)-n:])
	}
	return lines
}

var benchResult = regexp.MustCompile(`^Benchmark\S+\s+\d+\s+\S+ \S+`)

// BenchLines returns the benchmark result lines of a suite's output
// ("BenchmarkX-2  30  0 ns/op  4.1 p50-ms ...").
func (r *SuiteResult) BenchLines() []string {
	var out []string
	for _, ev := range r.Events {
		line := strings.TrimSpace(ev.Output)
		if ev.Action == "output" && benchResult.MatchString(line) {
			out = append(out, line)
		}
	}
	return out
}
