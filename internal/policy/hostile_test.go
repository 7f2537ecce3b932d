package policy

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"strings"
	"testing"
	"time"
)

// hostileCase is one hostile configuration and what Load must say about it:
// every want fragment in one of its errors, or every warn fragment in one of
// its warnings (a legitimate but surprising configuration).
type hostileCase struct {
	name       string
	data       []byte
	want, warn []string
}

// hostileCorpus reads testdata/hostile/*.yaml: each file starts with
// "# want: FRAGMENT" (rejected) or "# warn: FRAGMENT" (accepted with a warning)
// lines, and the generated inputs too large to keep as files.
func hostileCorpus(t testing.TB) []hostileCase {
	files, err := filepath.Glob("testdata/hostile/*.yaml")
	if err != nil || len(files) == 0 {
		t.Fatalf("no hostile corpus under testdata/hostile (%v)", err)
	}
	var out []hostileCase
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		c := hostileCase{name: strings.TrimSuffix(filepath.Base(f), ".yaml"), data: data}
		for _, line := range strings.Split(string(data), "\n") {
			if frag, ok := strings.CutPrefix(line, "# want: "); ok {
				c.want = append(c.want, frag)
			} else if frag, ok := strings.CutPrefix(line, "# warn: "); ok {
				c.warn = append(c.warn, frag)
			}
		}
		if len(c.want)+len(c.warn) == 0 {
			t.Fatalf("%s: no # want: or # warn: line", f)
		}
		out = append(out, c)
	}
	return append(out, generatedHostile()...)
}

const hostileHeader = "apiVersion: evictiond.io/v1alpha1\nkind: EvictionConfiguration\n"

// generatedHostile are the inputs of a megabyte or so.
func generatedHostile() []hostileCase {
	return []hostileCase{
		{name: "huge-over-configmap-maximum", data: padTo(hostileHeader+"dryRun: true\n", MaxDocumentBytes+1),
			want: []string{`(document): "1048577 bytes": must be at most 1048576 bytes (1 MiB, the largest ConfigMap)`}},
		{name: "huge-flow-list", data: flowList(MaxDocumentBytes),
			want: []string{`(document): "524`, `separators (newlines, commas, colons, dashes, brackets)": must be at most 50000`}},
		{name: "huge-unknown-fields", data: unknownFields(MaxDocumentSeparators/2 - 10),
			want: []string{`u0: "1": unknown field: not part of EvictionConfiguration`, `(document): "100 unknown or duplicate fields listed": there may be more`}},
		{name: "huge-signal-map", data: signalMap(MaxDocumentSeparators/2 - 10),
			want: []string{`evictionHard[s0]: "1Gi": unsupported eviction signal`, `(document): "24890 more problems": not listed: fix the ones above first`}},
		{name: "huge-second-document", data: append(padTo(hostileHeader, MaxDocumentBytes-20), "\n---\ndryRun: [\n"...),
			want: []string{`a second YAML document at line`}},
	}
}

// padTo pads a document with a comment to n bytes.
func padTo(doc string, n int) []byte {
	return []byte(doc + "#" + strings.Repeat("x", n-len(doc)-1))
}

// flowList is a namespace list of one-letter items, n bytes long: the input
// with the most YAML nodes per byte.
func flowList(n int) []byte {
	var b strings.Builder
	b.WriteString(hostileHeader + "exclusions: {namespaces: [")
	for b.Len() < n-4 {
		b.WriteString("a,")
	}
	b.WriteString("a]}")
	return []byte(b.String())
}

func unknownFields(n int) []byte {
	var b strings.Builder
	b.WriteString(hostileHeader)
	for i := range n {
		fmt.Fprintf(&b, "u%d: 1\n", i)
	}
	return []byte(b.String())
}

func signalMap(n int) []byte {
	var b strings.Builder
	b.WriteString(hostileHeader + "evictionHard:\n")
	for i := range n {
		fmt.Fprintf(&b, "  s%d: 1Gi\n", i)
	}
	return []byte(b.String())
}

// TestLoad_HostileCorpus: every hostile input is rejected with errors that
// each name a field and a rule, and that contain the case's fragments (which
// name the field, the value and the rule); or, for a legitimate but
// surprising one, accepted with the warning.
func TestLoad_HostileCorpus(t *testing.T) {
	corpus := hostileCorpus(t)
	if len(corpus) < 80 {
		t.Fatalf("hostile corpus has %d inputs, want at least 80", len(corpus))
	}
	for _, c := range corpus {
		t.Run(c.name, func(t *testing.T) {
			cfg, errs := Load(c.data)
			if len(c.want) > 0 {
				if errs == nil {
					t.Fatalf("accepted; want rejected with %q", c.want)
				}
				if len(errs) > maxReportedErrors+1 {
					t.Errorf("%d errors listed, want at most %d", len(errs), maxReportedErrors+1)
				}
				for _, e := range errs {
					if e.path() == "" || e.Rule == "" || e.Value == "" && !strings.HasPrefix(e.Rule, "must") {
						t.Errorf("error without field, value or rule: %+v", e)
					}
				}
				text := errs.Error()
				for _, w := range c.want {
					if !strings.Contains(text, w) {
						t.Errorf("errors:\n%s\nwant one containing %q", text, w)
					}
				}
				return
			}
			if errs != nil {
				t.Fatalf("rejected: %v; want accepted with warning %q", errs, c.warn)
			}
			for _, w := range c.warn {
				found := false
				for _, got := range cfg.Warnings {
					found = found || strings.Contains(got, w)
				}
				if !found {
					t.Errorf("warnings %q, want one containing %q", cfg.Warnings, w)
				}
			}
		})
	}
}

// TestLoad_ParseMemoryBounded: the worst 1 MiB inputs the size and separator
// caps let through to the parser allocate, in all, well under the pod's
// 128 Mi memory limit (total allocation bounds the peak heap whatever the
// GC does). The peak live heap is logged; before the caps a 1 MiB flow list
// peaked at ~148 MB.
func TestLoad_ParseMemoryBounded(t *testing.T) {
	const budget = 48 << 20
	inputs := map[string][]byte{
		// Just under the separator cap, padded to 1 MiB with a comment.
		"flow list at the separator cap": append(flowList(2*MaxDocumentSeparators-200), padTo("\n", MaxDocumentBytes-2*MaxDocumentSeparators)...),
		"unknown fields at the cap":      unknownFields(MaxDocumentSeparators/2 - 10),
		"signal map at the cap":          signalMap(MaxDocumentSeparators/2 - 10),
		"long namespace names, 1 MiB":    longNamespaces(MaxDocumentBytes),
		"over the byte cap":              padTo(hostileHeader, MaxDocumentBytes+1),
	}
	for name, data := range inputs {
		if len(data) > MaxDocumentBytes+1 {
			t.Fatalf("%s: %d bytes, want at most 1 MiB + 1", name, len(data))
		}
		total, peak := measureAlloc(func() { Load(data) })
		t.Logf("%s (%d bytes): allocated %.1f MB, peak live heap %.1f MB", name, len(data), float64(total)/1e6, float64(peak)/1e6)
		if total > budget {
			t.Errorf("%s: Load allocated %d bytes, want under %d", name, total, budget)
		}
	}
}

// longNamespaces is a valid list of 63-character namespace names, n bytes long.
func longNamespaces(n int) []byte {
	var b strings.Builder
	b.WriteString(hostileHeader + "exclusions:\n  namespaces:\n")
	for i := 0; b.Len() < n-80; i++ {
		fmt.Fprintf(&b, "  - %s%08d\n", strings.Repeat("n", 55), i)
	}
	return []byte(b.String())
}

// measureAlloc returns the bytes f allocates with the collector off (an upper
// bound of its peak heap, whatever the GC does), and the peak live heap seen
// while it runs again with the collector on, as in the pod (sampled).
func measureAlloc(f func()) (total, peak uint64) {
	old := debug.SetGCPercent(-1)
	runtime.GC()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	f()
	runtime.ReadMemStats(&after)
	total = after.TotalAlloc - before.TotalAlloc
	debug.SetGCPercent(old)

	runtime.GC()
	runtime.ReadMemStats(&before)
	stop, done := make(chan struct{}), make(chan uint64)
	go func() {
		var m runtime.MemStats
		var max uint64
		for {
			runtime.ReadMemStats(&m)
			max = maxU64(max, m.HeapAlloc)
			select {
			case <-stop:
				done <- max
				return
			case <-time.After(100 * time.Microsecond):
			}
		}
	}()
	f()
	close(stop)
	high := <-done
	return total, high - min(high, before.HeapAlloc)
}

func maxU64(a, b uint64) uint64 {
	if a > b {
		return a
	}
	return b
}
