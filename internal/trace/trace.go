// Package trace is the record of an episode as the decision loop saw it: every
// answer the node gave the loop (readings, the fast poll's readings, pod
// cgroups, reclaim, the brake's freeze, thaw and kill), its wake-ups, and each
// pass's evictions — one JSON object a line. `evictiond run --record-trace`
// writes it from the real node; `evictiond simulate --trace` replays it
// through the simulated node on a virtual clock (internal/simulate.Replay),
// and the replay agreement test requires the same decisions from both.
package trace

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/evictiond/evictiond/internal/policy"
)

// Kinds of records.
const (
	KindStart        = "start"        // the recording's first line: the node and its configuration
	KindConfig       = "config"       // a reloaded configuration
	KindObserve      = "observe"      // Stats.Observe: pods passed, readings returned
	KindUsage        = "usage"        // Stats.ObserveUsage: the pods' fresh usage
	KindFast         = "fast"         // Stats.ObserveFast
	KindFastReadings = "fastReadings" // Stats.FastReadings
	KindLook         = "look"         // Stats.LookInFlight: readings looked at, or the answer that ended the looks
	KindCgroups      = "cgroups"      // Stats.PodCgroupUIDs
	KindReclaim      = "reclaim"      // Reclaimer.Reclaim
	KindPodReclaim   = "podReclaim"   // MemoryReclaimer.ReclaimPodMemory
	KindBrake        = "brake"        // Freezer: freeze, thaw, kill
	KindWake         = "wake"         // a wake-up of the kernel's fast path
	KindPass         = "pass"         // a pass's decisions
)

// Record is one line of a trace; Kind says which fields are set.
type Record struct {
	Kind string    `json:"kind"`
	At   time.Time `json:"at"`

	// start
	Node string    `json:"node,omitempty"`
	Self types.UID `json:"self,omitempty"`
	// start, config: the configuration document in force.
	Config string `json:"config,omitempty"`
	// start: --dry-run overrode the document's dryRun.
	DryRun bool `json:"dryRun,omitempty"`

	// observe: the pods the loop passed that the trace has not shown yet,
	// and the UIDs of those shown before that it no longer passes.
	Added []*v1.Pod      `json:"added,omitempty"`
	Gone  []types.UID    `json:"gone,omitempty"`
	Obs   *Observed      `json:"obs,omitempty"`
	Usage PodStats       `json:"usage,omitempty"`
	Fast  Observations   `json:"fast,omitempty"`
	Fasts []Observations `json:"fasts,omitempty"`
	UIDs  []types.UID    `json:"uids,omitempty"`
	// look: the eviction request was answered before the look (no readings).
	Answered bool `json:"answered,omitempty"`

	Reclaim *Reclaim `json:"reclaim,omitempty"`
	// podReclaim: the pod asked to give memory back (memory.reclaim) and
	// what it freed.
	PodReclaim *PodReclaim `json:"podReclaim,omitempty"`
	Brake      *BrakeCall  `json:"brake,omitempty"`
	Pass       *Pass       `json:"pass,omitempty"`
	Err        string      `json:"err,omitempty"`
}

// Observations are readings by signal.
type Observations = policy.Observations

// PodStats are the pods' usage by UID.
type PodStats = policy.PodStatsByUID

// Observed is Stats.Observe's answer.
type Observed struct {
	Observations Observations             `json:"observations"`
	Pods         PodStats                 `json:"pods,omitempty"`
	Layout       policy.FilesystemLayout  `json:"layout"`
	Missing      map[policy.Signal]string `json:"missing,omitempty"`
}

// Reclaim is one node-level reclaim step and what it freed.
type Reclaim struct {
	Step   policy.ReclaimStep `json:"step"`
	Signal policy.Signal      `json:"signal"`
	Need   int64              `json:"need"`
	Freed  int64              `json:"freed"`
	Items  int                `json:"items,omitempty"`
}

// PodReclaim is one pod's memory.reclaim (reclaim before evict).
type PodReclaim struct {
	UID   types.UID `json:"uid"`
	Asked int64     `json:"asked"`
	Freed int64     `json:"freed"`
	Items int       `json:"items,omitempty"`
}

// Brake operations.
const (
	BrakeFreeze = "freeze"
	BrakeThaw   = "thaw"
	BrakeKill   = "kill"
)

// BrakeCall is one call of the brake on a pod.
type BrakeCall struct {
	Op  string    `json:"op"`
	UID types.UID `json:"uid"`
	Pod string    `json:"pod,omitempty"`
	// OK: the pod was held (thaw, kill).
	OK bool `json:"ok,omitempty"`
}

// Pass is what one pass decided.
type Pass struct {
	Source    string     `json:"source"`
	Evictions []Eviction `json:"evictions,omitempty"`
	// Starved is the signal the pass acted on, if any.
	Starved policy.Signal `json:"starved,omitempty"`
	// Refused are the pods whose eviction the API server refused (a
	// PodDisruptionBudget's 429) in this pass.
	Refused []types.UID `json:"refused,omitempty"`
}

// Eviction is one answer of the evictor: the pod (namespace/name) and the
// outcome (evicted, deleted, pdb_blocked, ...).
type Eviction struct {
	Pod     string    `json:"pod,omitempty"`
	UID     types.UID `json:"uid,omitempty"`
	Outcome string    `json:"outcome"`
}

// Writer appends records to a file, up to a size; past it the recording
// stops (one last record says so) and the episode goes on unrecorded.
type Writer struct {
	mu      sync.Mutex
	f       io.WriteCloser
	w       *bufio.Writer
	written int64
	max     int64
	full    bool
	err     error
}

// DefaultMaxBytes bounds a recording: about an hour of a busy episode.
const DefaultMaxBytes = 256 << 20

// Create starts a recording at path, at most max bytes; a recording already
// there becomes path.previous.
func Create(path string, max int64) (*Writer, error) {
	if max <= 0 {
		return nil, fmt.Errorf("trace %s: max bytes %d: must be positive", path, max)
	}
	// The previous run's recording is kept beside it (a restart mid-episode
	// must not lose what led to it).
	if err := os.Rename(path, path+".previous"); err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("trace: keeping the previous recording: %w", err)
	}
	f, err := os.OpenFile(path, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o600)
	if err != nil {
		return nil, fmt.Errorf("trace: %w", err)
	}
	return &Writer{f: f, w: bufio.NewWriter(f), max: max}, nil
}

// NewWriter records to w (tests, replays), without a bound.
func NewWriter(w io.Writer) *Writer {
	return &Writer{f: nopCloser{w}, w: bufio.NewWriter(w), max: 1<<63 - 1}
}

type nopCloser struct{ io.Writer }

func (nopCloser) Close() error { return nil }

// ErrFull is the last record of a recording that reached its bound.
var ErrFull = errors.New("trace: size bound reached; recording stopped")

// Write appends r. Errors are kept for Close: a recording never stops the agent.
func (t *Writer) Write(r Record) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.full || t.err != nil {
		return
	}
	b, err := json.Marshal(r)
	if err != nil {
		t.err = err
		return
	}
	if t.written+int64(len(b))+1 > t.max {
		t.full = true
		b, _ = json.Marshal(Record{Kind: KindPass, At: r.At, Err: ErrFull.Error()})
	}
	n, err := t.w.Write(append(b, '\n'))
	t.written += int64(n)
	if err == nil {
		err = t.w.Flush() // each record on disk as it happens: a crash keeps the episode
	}
	if err != nil {
		t.err = err
	}
}

// Close flushes and closes; it returns the first error met while recording.
func (t *Writer) Close() error {
	t.mu.Lock()
	defer t.mu.Unlock()
	err := t.w.Flush()
	if cerr := t.f.Close(); err == nil {
		err = cerr
	}
	if t.err != nil {
		return t.err
	}
	return err
}

// MaxLine bounds one record when reading (a pass with many pods' stats).
const MaxLine = 64 << 20

// Read parses a trace; an error names the line. A last line without its
// newline (the recording was cut mid-record, or is still being written) is
// left out.
func Read(r io.Reader) ([]Record, error) {
	br := bufio.NewReaderSize(r, 1<<20)
	var out []Record
	for line := 1; ; line++ {
		b, err := readLine(br)
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("trace line %d: %w", line, err)
		}
		var rec Record
		if err := json.Unmarshal(b, &rec); err != nil {
			return nil, fmt.Errorf("trace line %d: %w", line, err)
		}
		if rec.Kind == "" {
			return nil, fmt.Errorf("trace line %d: kind: value \"\": must be one of the record kinds", line)
		}
		out = append(out, rec)
	}
	if len(out) == 0 || out[0].Kind != KindStart {
		return nil, errors.New("trace: first record: must be the start record (node and configuration)")
	}
	return out, nil
}

// readLine reads one newline-terminated line of at most MaxLine bytes; a
// last line without a newline reads as io.EOF.
func readLine(br *bufio.Reader) ([]byte, error) {
	var line []byte
	for {
		chunk, err := br.ReadSlice('\n')
		line = append(line, chunk...)
		if len(line) > MaxLine {
			return nil, fmt.Errorf("longer than %d bytes", MaxLine)
		}
		switch err {
		case nil:
			return line, nil
		case bufio.ErrBufferFull:
			continue
		default:
			return nil, io.EOF // io.EOF itself, or a read error: the recording ends here
		}
	}
}

// Decisions are a trace's decisions in order, one line each: the evictor's
// answers ("evict shop/web-1 evicted") and the pods asked to give memory
// back ("memory.reclaim <uid> <bytes>"), and, separately, the brake's calls
// ("freeze <uid>", "kill <uid>"). The two lists are kept apart: a kill runs
// beside the loop, so its place among a pass's records is not fixed.
func Decisions(recs []Record) (evictions, brake []string) {
	for _, r := range recs {
		switch {
		case r.Kind == KindPodReclaim && r.PodReclaim != nil:
			// In the loop goroutine, before its pass's evictions: one order.
			evictions = append(evictions, fmt.Sprintf("memory.reclaim %s %d", r.PodReclaim.UID, r.PodReclaim.Asked))
		case r.Kind == KindPass && r.Pass != nil:
			for _, e := range r.Pass.Evictions {
				evictions = append(evictions, "evict "+e.Pod+" "+e.Outcome)
			}
		case r.Kind == KindBrake && r.Brake != nil:
			line := r.Brake.Op + " " + string(r.Brake.UID)
			if r.Brake.Op != BrakeFreeze && !r.Brake.OK {
				line += " (not held)"
			}
			brake = append(brake, line)
		}
	}
	return evictions, brake
}
