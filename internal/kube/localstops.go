package kube

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/evictiond/evictiond/internal/policy"
	"github.com/evictiond/evictiond/internal/statefile"
)

// journalEntry is one unreported local stop as kept on disk, so that a restart of
// evictiond while the API server is down does not lose it.
type journalEntry struct {
	Namespace          string            `json:"namespace"`
	Name               string            `json:"name"`
	UID                types.UID         `json:"uid"`
	Signal             policy.Signal     `json:"signal"`
	GracePeriodSeconds int64             `json:"gracePeriodSeconds"`
	Message            string            `json:"message,omitempty"`
	Annotations        map[string]string `json:"annotations,omitempty"`
	StoppedAt          time.Time         `json:"stoppedAt"`
}

// maxJournalBytes caps the journal read at start. An entry is a few hundred
// bytes, and the local stop makes at most one a pass while the API server is
// down: a larger file is not one evictiond wrote.
const maxJournalBytes = 1 << 20

// errJournalCorrupt marks a journal that cannot be trusted: undecodable,
// truncated, oversized, or with an entry that names no pod.
var errJournalCorrupt = errors.New("local-stop journal corrupt")

// loadLocalStops reads the journal at path; a missing file holds no stops. A
// journal that cannot be trusted is an error wrapping errJournalCorrupt;
// another error is one of reading. Temporary files a crash left beside it
// are removed first (the rename that would have made one the journal did not
// happen, so the journal before it is the truth).
func loadLocalStops(path string) ([]localStop, []string, error) {
	temps, err := statefile.RemoveTemps(path)
	if err != nil {
		return nil, temps, err
	}
	data, err := statefile.Read(path, maxJournalBytes)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil, temps, nil
	case errors.Is(err, statefile.ErrTooLarge):
		return nil, temps, fmt.Errorf("%w: %w", errJournalCorrupt, err)
	case err != nil:
		return nil, temps, fmt.Errorf("reading local-stop journal: %w", err)
	}
	var entries []journalEntry
	if err := json.Unmarshal(data, &entries); err != nil {
		return nil, temps, fmt.Errorf("%w: %s: %d bytes: %w", errJournalCorrupt, path, len(data), err)
	}
	stops := make([]localStop, 0, len(entries))
	for i, e := range entries {
		if e.Namespace == "" || e.Name == "" || e.UID == "" || e.StoppedAt.IsZero() {
			return nil, temps, fmt.Errorf("%w: %s: entry %d: namespace %q, name %q, uid %q, stoppedAt %v: must name a pod and when it was stopped",
				errJournalCorrupt, path, i, e.Namespace, e.Name, e.UID, e.StoppedAt)
		}
		pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: e.Namespace, Name: e.Name, UID: e.UID}}
		stops = append(stops, localStop{at: e.StoppedAt, candidate: Candidate{
			Pod: pod, Signal: e.Signal, Hard: true, GracePeriodSeconds: e.GracePeriodSeconds,
			Message: e.Message, Annotations: e.Annotations,
		}})
	}
	return stops, temps, nil
}

// saveLocalStops replaces the journal at path atomically (statefile.WriteAtomic);
// no stops removes it.
func saveLocalStops(path string, stops []localStop) error {
	if len(stops) == 0 {
		if err := statefile.Remove(path); err != nil {
			return fmt.Errorf("removing local-stop journal: %w", err)
		}
		return nil
	}
	entries := make([]journalEntry, 0, len(stops))
	for _, s := range stops {
		c := s.candidate
		entries = append(entries, journalEntry{Namespace: c.Pod.Namespace, Name: c.Pod.Name, UID: c.Pod.UID,
			Signal: c.Signal, GracePeriodSeconds: c.GracePeriodSeconds, Message: c.Message,
			Annotations: c.Annotations, StoppedAt: s.at})
	}
	data, err := json.MarshalIndent(entries, "", "  ")
	if err != nil {
		return fmt.Errorf("encoding local-stop journal: %w", err)
	}
	if err := statefile.WriteAtomic(path, data, 0o600); err != nil {
		return fmt.Errorf("writing local-stop journal: %w", err)
	}
	return nil
}
