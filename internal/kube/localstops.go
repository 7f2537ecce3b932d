package kube

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/evictiond/evictiond/internal/policy"
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

// loadLocalStops reads the journal at path; a missing file holds no stops.
func loadLocalStops(path string) ([]localStop, error) {
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading local-stop journal: %w", err)
	}
	var entries []journalEntry
	if err := json.Unmarshal(data, &entries); err != nil {
		return nil, fmt.Errorf("local-stop journal %s: %w", path, err)
	}
	stops := make([]localStop, 0, len(entries))
	for _, e := range entries {
		pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: e.Namespace, Name: e.Name, UID: e.UID}}
		stops = append(stops, localStop{at: e.StoppedAt, candidate: Candidate{
			Pod: pod, Signal: e.Signal, Hard: true, GracePeriodSeconds: e.GracePeriodSeconds,
			Message: e.Message, Annotations: e.Annotations,
		}})
	}
	return stops, nil
}

// saveLocalStops replaces the journal at path atomically (write, fsync, rename); no
// stops removes it.
func saveLocalStops(path string, stops []localStop) error {
	if len(stops) == 0 {
		if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
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
	tmp, err := os.CreateTemp(filepath.Dir(path), ".local-stops-*")
	if err != nil {
		return fmt.Errorf("writing local-stop journal: %w", err)
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return fmt.Errorf("writing local-stop journal: %w", err)
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return fmt.Errorf("writing local-stop journal: %w", err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("writing local-stop journal: %w", err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("writing local-stop journal: %w", err)
	}
	return nil
}
