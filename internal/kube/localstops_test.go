package kube

import (
	"bytes"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/record"

	"github.com/evictiond/evictiond/internal/policy"
)

func journalStop(uid string, at time.Time) localStop {
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "pod-" + uid, UID: types.UID(uid)}}
	return localStop{at: at, candidate: Candidate{Pod: pod, Signal: policy.SignalMemoryAvailable, Hard: true, GracePeriodSeconds: 1,
		Message: "The node was low on resource: memory. "}}
}

// startedEvictor starts an Evictor on the journal at path as the agent does,
// and returns the UIDs of the stops it will report, its Events and its log.
func startedEvictor(t *testing.T, path string) ([]types.UID, []string, string) {
	t.Helper()
	opts := evictorOptions(t, "n")
	opts.LocalStop.JournalPath = path
	var logs bytes.Buffer
	opts.Logger = slog.New(slog.NewTextHandler(&logs, nil))
	rec := record.NewFakeRecorder(10)
	ev, err := NewEvictor(nil, rec, opts)
	if err != nil {
		t.Fatalf("the agent did not start: %v", err)
	}
	var uids []types.UID
	for _, s := range ev.localStops {
		uids = append(uids, s.candidate.Pod.UID)
	}
	var events []string
	for len(rec.Events) > 0 {
		events = append(events, <-rec.Events)
	}
	return uids, events, logs.String()
}

// TestLocalStopJournalCrashPoints: evictiond killed at each step of a journal
// write (the journal held stop a; the write adds b) restarts with exactly
// the stops of the last completed rename, and no temporary file is left. The
// journal is written before the CRI stop (write-ahead), so a write that never
// reached its rename is a stop that was never made: b is rightly forgotten.
func TestLocalStopJournalCrashPoints(t *testing.T) {
	at := time.Date(2026, 11, 25, 19, 0, 0, 0, time.UTC)
	a, b := journalStop("a", at), journalStop("b", at.Add(time.Second))
	newJournal := func(t *testing.T) []byte {
		dir := t.TempDir()
		if err := saveLocalStops(filepath.Join(dir, "j.json"), []localStop{a, b}); err != nil {
			t.Fatal(err)
		}
		data, _ := os.ReadFile(filepath.Join(dir, "j.json"))
		return data
	}
	cases := []struct {
		name string
		// old: the journal before the write holds a; crash leaves the directory as
		// a kill at that step would.
		old   bool
		crash func(t *testing.T, path string)
		want  []types.UID
	}{
		{"killed after creating the temporary file", true, func(t *testing.T, path string) {
			writeTemp(t, path, nil)
		}, []types.UID{"a"}},
		{"killed while writing the temporary file", true, func(t *testing.T, path string) {
			full := newJournal(t)
			writeTemp(t, path, full[:len(full)/2])
		}, []types.UID{"a"}},
		{"killed after fsync, before the rename", true, func(t *testing.T, path string) {
			writeTemp(t, path, newJournal(t))
		}, []types.UID{"a"}},
		{"killed after the rename, before the directory fsync", true, func(t *testing.T, path string) {
			if err := os.WriteFile(path, newJournal(t), 0o600); err != nil {
				t.Fatal(err)
			}
		}, []types.UID{"a", "b"}},
		{"killed during the first write ever", false, func(t *testing.T, path string) {
			writeTemp(t, path, []byte(`[{"namespace": "ns", "na`))
		}, nil},
		{"killed while removing the journal (all reported)", true, func(t *testing.T, path string) {
			if err := os.Remove(path); err != nil {
				t.Fatal(err)
			}
		}, nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "local-stops.json")
			if tc.old {
				if err := saveLocalStops(path, []localStop{a}); err != nil {
					t.Fatal(err)
				}
			}
			tc.crash(t, path)
			uids, events, _ := startedEvictor(t, path)
			if !slices.Equal(uids, tc.want) {
				t.Errorf("stops after restart = %v, want %v", uids, tc.want)
			}
			if len(events) > 0 {
				t.Errorf("events %q, want none: nothing was corrupt", events)
			}
			if left := dirNames(t, filepath.Dir(path)); slices.ContainsFunc(left, func(n string) bool { return strings.Contains(n, ".tmp-") }) {
				t.Errorf("temporary files left after restart: %v", left)
			}
		})
	}
}

// TestLocalStopJournalCorruptIsMovedAside: a journal no write of evictiond's
// can leave (truncated, empty, garbage, oversized, an entry naming no pod) no
// longer keeps the agent from starting: it is moved aside unchanged for the
// operator, a Warning Event on the Node and a log line say so, the agent
// starts with no stops to report, and the next stop writes a fresh journal.
func TestLocalStopJournalCorruptIsMovedAside(t *testing.T) {
	at := time.Date(2026, 11, 25, 19, 0, 0, 0, time.UTC)
	valid := func(t *testing.T) []byte {
		p := filepath.Join(t.TempDir(), "j.json")
		if err := saveLocalStops(p, []localStop{journalStop("a", at), journalStop("b", at)}); err != nil {
			t.Fatal(err)
		}
		data, _ := os.ReadFile(p)
		return data
	}
	cases := []struct {
		name string
		data func(t *testing.T) []byte
		why  string
	}{
		{"truncated", func(t *testing.T) []byte { d := valid(t); return d[:len(d)-7] }, "unexpected end of JSON input"},
		{"zero length", func(*testing.T) []byte { return nil }, "0 bytes"},
		{"garbage", func(*testing.T) []byte { return []byte("\x00\x01garbage{") }, "invalid character"},
		{"not a list", func(*testing.T) []byte { return []byte(`{"namespace": "ns"}`) }, "cannot unmarshal object"},
		{"entry naming no pod", func(*testing.T) []byte {
			return []byte(`[{"namespace": "ns", "name": "p", "stoppedAt": "2026-11-25T19:00:00Z"}]`)
		}, `uid ""`},
		{"oversized", func(*testing.T) []byte { return append([]byte("["), bytes.Repeat([]byte(" "), maxJournalBytes)...) }, "more than 1048576 bytes"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "local-stops.json")
			data := tc.data(t)
			if err := os.WriteFile(path, data, 0o600); err != nil {
				t.Fatal(err)
			}
			uids, events, logs := startedEvictor(t, path)
			if len(uids) != 0 {
				t.Errorf("stops from a corrupt journal: %v", uids)
			}
			if len(events) != 1 || !strings.HasPrefix(events[0], "Warning "+EventReasonLocalStopJournalCorrupt+" ") || !strings.Contains(events[0], tc.why) {
				t.Errorf("events %q, want one Warning %s saying %q", events, EventReasonLocalStopJournalCorrupt, tc.why)
			}
			if !strings.Contains(logs, "local-stop journal corrupt, moved aside") {
				t.Errorf("log:\n%s\nwant the journal's move logged", logs)
			}
			if _, err := os.Stat(path); !os.IsNotExist(err) {
				t.Errorf("corrupt journal still at %s: %v", path, err)
			}
			aside, _ := filepath.Glob(path + ".corrupt-*")
			if len(aside) != 1 {
				t.Fatalf("files moved aside: %v, want one", aside)
			}
			if kept, _ := os.ReadFile(aside[0]); !bytes.Equal(kept, data) {
				t.Errorf("the file moved aside differs from the corrupt journal")
			}
			if !strings.Contains(events[0], aside[0]) {
				t.Errorf("event %q does not say where the journal went (%s)", events[0], aside[0])
			}
			// The next stop journals afresh, and a restart finds it.
			if err := saveLocalStops(path, []localStop{journalStop("c", at)}); err != nil {
				t.Fatal(err)
			}
			if uids, events, _ := startedEvictor(t, path); !slices.Equal(uids, []types.UID{"c"}) || len(events) != 0 {
				t.Errorf("after the next stop and a restart: stops %v, events %q; want [c] and none", uids, events)
			}
		})
	}
}

// writeTemp leaves a temporary file of a journal write to path, as a kill
// before its rename does.
func writeTemp(t *testing.T, path string, data []byte) {
	t.Helper()
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write(data); err != nil {
		t.Fatal(err)
	}
	f.Close()
}

func dirNames(t *testing.T, dir string) []string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	return names
}
