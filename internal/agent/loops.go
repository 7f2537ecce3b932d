package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"time"

	v1 "k8s.io/api/core/v1"

	"github.com/evictiond/evictiond/internal/policy"
	"github.com/evictiond/evictiond/internal/statefile"
)

// Eviction loops (docs/operations.md): every pod evicted is counted against
// its workload (policy.LoopTracker); a workload evicted
// evictionLoops.count times within evictionLoops.window is in a loop, and
// each of its evictions then holds the node's pressure condition (and so
// evictiond's NoSchedule taint) for a backoff that doubles while it keeps
// returning. The owner is told with a Warning Event EvictionLoop on the
// workload. The tracker's records are kept in a journal beside the image GC
// state, so a restarted evictiond keeps the count and the backoff.

// Owners names a workload in an Event (kube.WorkloadRefs): the reference
// must carry its UID for `kubectl describe` to list the Event.
type Owners interface {
	Reference(ctx context.Context, w policy.Workload) (*v1.ObjectReference, error)
}

// LoopJournalPath is where the daemon keeps the loop records: the state
// directory the DaemonSet mounts (the image GC state's and the local-stop
// journal's).
func LoopJournalPath(cfg *policy.Config) string {
	if cfg.Reclaim.ImageStateFile == "" {
		return ""
	}
	return filepath.Join(filepath.Dir(cfg.Reclaim.ImageStateFile), "loops.json")
}

// maxLoopJournalBytes caps the journal read at start: a record is under 4 KiB
// and a node runs at most a few hundred workloads.
const maxLoopJournalBytes = 4 << 20

// loopState is the agent's part of loop detection.
type loopState struct {
	tracker *policy.LoopTracker
	journal string
	owners  Owners
	// verdicts of the current Pass, for its report.
	verdicts []policy.LoopVerdict
}

// initLoops loads the journal (a damaged one is moved aside and counting
// starts afresh) and re-applies the backoffs still running.
func (a *Agent) initLoops(journal string, owners Owners) {
	now := a.opts.Clock.Now()
	records := a.loadLoopJournal(journal, now)
	a.loops = loopState{tracker: policy.NewLoopTracker(a.engine.Config().Loops, records, now), journal: journal, owners: owners}
	a.applyLoopHolds(now)
	for _, r := range a.loops.tracker.Records() {
		if r.Level > 0 {
			a.log.Info("eviction loop carried over from the previous run", "workload", r.Workload.String(),
				"evictions", r.Total, "backoffUntil", r.BackoffUntil)
		}
	}
}

func (a *Agent) loadLoopJournal(path string, now time.Time) []policy.LoopRecord {
	if path == "" {
		return nil
	}
	if temps, err := statefile.RemoveTemps(path); err != nil {
		a.log.Warn("eviction loop journal: temporary files not removed", "path", path, "err", err)
	} else if len(temps) > 0 {
		a.log.Info("eviction loop journal: temporary files of an interrupted write removed", "files", temps)
	}
	data, err := statefile.Read(path, maxLoopJournalBytes)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	var records []policy.LoopRecord
	if err == nil {
		err = json.Unmarshal(data, &records)
	}
	if err == nil {
		for i, r := range records {
			if r.Workload.Kind == "" || r.Workload.Name == "" || len(r.Evictions) == 0 {
				err = fmt.Errorf("record %d: workload %q, %d evictions: must name a workload and its evictions", i, r.Workload.String(), len(r.Evictions))
				break
			}
		}
	}
	if err != nil {
		aside, mvErr := statefile.MoveAside(path, now)
		a.log.Error("eviction loop journal unusable: counting starts afresh", "path", path, "err", err, "movedTo", aside, "moveErr", mvErr)
		return nil
	}
	return records
}

func (a *Agent) saveLoopJournal() {
	path := a.loops.journal
	if path == "" {
		return
	}
	records := a.loops.tracker.Records()
	var err error
	if len(records) == 0 {
		err = statefile.Remove(path)
	} else {
		var data []byte
		if data, err = json.MarshalIndent(records, "", "  "); err == nil {
			err = statefile.WriteAtomic(path, data, 0o600)
		}
	}
	if err != nil {
		a.log.Error("eviction loop journal not saved: a restart would forget the loops", "path", path, "err", err)
	}
}

// applyLoopHolds hands the running backoffs to the engine and the gauge.
func (a *Agent) applyLoopHolds(now time.Time) {
	for cond, until := range a.loops.tracker.Holds(now) {
		a.engine.HoldConditionUntil(cond, until)
	}
	a.metrics.LoopWorkloads.Reset()
	for _, r := range a.loops.tracker.Records() {
		if r.Level > 0 && r.BackoffUntil.After(now) {
			a.metrics.LoopWorkloads.WithLabelValues(r.Workload.MetricKind()).Inc()
		}
	}
}

// reconfigureLoops applies a reloaded evictionLoops section. Turning loops
// off releases every backoff at once and removes the journal: the operator's
// way to give a held node back to the scheduler.
func (a *Agent) reconfigureLoops(cfg policy.LoopsConfig) {
	had := a.loops.tracker.Len()
	a.loops.tracker.SetConfig(cfg)
	if cfg.Enabled {
		return
	}
	a.engine.ReleaseConditionHolds()
	if had > 0 {
		a.log.Warn("eviction loops turned off: every loop backoff released", "workloads", had)
	}
	a.saveLoopJournal()
	a.applyLoopHolds(a.opts.Clock.Now())
}

// expireLoops forgets the loops that ended (the workload stayed away for the
// window after its backoff); each pass calls it, so the gauge follows.
func (a *Agent) expireLoops() {
	if a.loops.tracker == nil || a.loops.tracker.Len() == 0 {
		return // an idle node pays nothing
	}
	now := a.opts.Clock.Now()
	before := a.loops.tracker.Len()
	a.loops.tracker.Expire(now)
	if a.loops.tracker.Len() != before {
		a.saveLoopJournal()
	}
	a.applyLoopHolds(now)
}

// noteLoopEviction counts a disruptive eviction against its workload and,
// in a loop, holds the node's condition and tells the owner.
func (a *Agent) noteLoopEviction(c policy.Candidate) {
	cfg := a.engine.Config().Loops
	// A pod over its own local-storage limit threatens no one else: its
	// eviction is no node pressure to back off from.
	if !cfg.Enabled || a.loops.tracker == nil || c.LocalStorage || c.Signal.Condition() == "" {
		return
	}
	now := a.opts.Clock.Now()
	ev := policy.LoopEviction{At: now, Pod: c.Pod.Name, Signal: c.Signal}
	if c.Signal.IsMemory() && c.ExpectedReclaim > 0 {
		ev.Memory = c.ExpectedReclaim
		if st := c.Pod.Status.StartTime; st != nil && now.After(st.Time) {
			ev.GrowthRate = float64(ev.Memory) / now.Sub(st.Time).Seconds()
		}
	}
	v := a.loops.tracker.Record(policy.WorkloadOf(c.Pod), ev)
	a.saveLoopJournal()
	if !v.InLoop {
		a.log.Info("eviction counted against its workload", "workload", v.Workload.String(), "inWindow", v.Count,
			"loopAt", cfg.Count, "window", cfg.Window)
		return
	}
	a.loops.verdicts = append(a.loops.verdicts, v)
	a.engine.HoldConditionUntil(c.Signal.Condition(), v.Until)
	a.metrics.LoopEvictions.WithLabelValues(v.Workload.MetricKind()).Inc()
	a.applyLoopHolds(now)
	msg := v.Describe(a.opts.NodeName)
	a.log.Warn("eviction loop", "workload", v.Workload.String(), "evictions", v.Count, "started", v.Started,
		"backoff", v.Backoff, "until", v.Until, "memoryAtEviction", v.Last.Memory, "growthBytesPerSecond", int64(v.Rate))
	a.recordLoopEvent(v.Workload, msg)
}

// recordLoopEvent records the EvictionLoop Event on the workload, off the
// loop: naming a Deployment takes a read of it (Owners).
func (a *Agent) recordLoopEvent(w policy.Workload, msg string) {
	o := a.offLoop
	o.wg.Add(1)
	go func() {
		defer o.wg.Done()
		ref := &v1.ObjectReference{Kind: w.Kind, APIVersion: w.APIVersion, Namespace: w.Namespace, Name: w.Name, UID: w.UID}
		if a.loops.owners != nil {
			var err error
			if ref, err = a.loops.owners.Reference(context.Background(), w); err != nil {
				a.log.Warn("EvictionLoop Event recorded without the workload's UID: kubectl describe will not list it", "workload", w.String(), "err", err)
			}
		}
		a.recorder.Event(ref, v1.EventTypeWarning, "EvictionLoop", msg)
	}()
}

// takeLoopVerdicts returns the loop verdicts since the last call (Pass's report).
func (a *Agent) takeLoopVerdicts() []policy.LoopVerdict {
	v := a.loops.verdicts
	a.loops.verdicts = nil
	return v
}
