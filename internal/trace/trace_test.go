package trace

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/evictiond/evictiond/internal/policy"
)

var t0 = time.Date(2026, 11, 25, 12, 0, 0, 0, time.UTC)

func TestWriteReadRoundTrip(t *testing.T) {
	var buf bytes.Buffer
	w := NewWriter(&buf)
	w.Write(Record{Kind: KindStart, At: t0, Node: "n1", Config: "apiVersion: x\n"})
	w.Write(Record{Kind: KindFast, At: t0.Add(time.Millisecond), Fast: policy.Observations{
		policy.SignalMemoryAvailable: {Available: 100 << 20, Capacity: 1 << 30, Time: t0}}})
	w.Write(Record{Kind: KindPass, At: t0.Add(2 * time.Millisecond), Pass: &Pass{Source: "notifier",
		Evictions: []Eviction{{Pod: "a/b", UID: "u1", Outcome: "evicted"}}}})
	w.Write(Record{Kind: KindBrake, At: t0.Add(3 * time.Millisecond), Brake: &BrakeCall{Op: BrakeKill, UID: "u1", OK: true}})
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	recs, err := Read(&buf)
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != 4 || recs[1].Fast[policy.SignalMemoryAvailable].Available != 100<<20 || !recs[1].Fast[policy.SignalMemoryAvailable].Time.Equal(t0) {
		t.Fatalf("round trip lost data: %+v", recs)
	}
	ev, br := Decisions(recs)
	if strings.Join(ev, ";") != "evict a/b evicted" || strings.Join(br, ";") != "kill u1" {
		t.Fatalf("decisions %q %q", ev, br)
	}
}

func TestReadLeavesOutACutLastLineAndNamesBadLines(t *testing.T) {
	start := `{"kind":"start","at":"2026-11-25T12:00:00Z","node":"n"}` + "\n"
	recs, err := Read(strings.NewReader(start + `{"kind":"pass","at":"2026-11-25T12:00:01Z","pa`))
	if err != nil || len(recs) != 1 {
		t.Fatalf("a cut last record must be left out: %d records, %v", len(recs), err)
	}
	for in, want := range map[string]string{
		start + "{not json}\n":                               "trace line 2",
		start + `{"at":"2026-11-25T12:00:00Z"}` + "\n":       "trace line 2: kind",
		`{"kind":"pass","at":"2026-11-25T12:00:00Z"}` + "\n": "first record: must be the start record",
		"": "first record: must be the start record",
	} {
		if _, err := Read(strings.NewReader(in)); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Read(%q) = %v, want an error containing %q", in, err, want)
		}
	}
}

func TestCreateBoundsTheRecordingAndKeepsThePrevious(t *testing.T) {
	path := filepath.Join(t.TempDir(), "trace.jsonl")
	if err := os.WriteFile(path, []byte("the previous run\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	w, err := Create(path, 400)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 20 {
		w.Write(Record{Kind: KindWake, At: t0.Add(time.Duration(i) * time.Second)})
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if prev, _ := os.ReadFile(path + ".previous"); string(prev) != "the previous run\n" {
		t.Fatalf("previous recording not kept: %q", prev)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSuffix(string(data), "\n"), "\n")
	if len(data) > 400+200 || !strings.Contains(lines[len(lines)-1], ErrFull.Error()) || len(lines) >= 20 {
		t.Fatalf("recording not bounded at 400 bytes or its end not said (%d bytes, %d lines, last %q)", len(data), len(lines), lines[len(lines)-1])
	}
	if _, err := Create(path, 0); err == nil || !strings.Contains(err.Error(), "max bytes 0: must be positive") {
		t.Fatalf("Create with no bound: %v", err)
	}
}
