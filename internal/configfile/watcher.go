// Package configfile loads evictiond's configuration file and reloads it when
// it changes, including the kubelet's atomic ConfigMap update (a new
// timestamped directory swapped in under the "..data" symlink). A valid new
// file is applied whole; an invalid one is rejected and the last good
// configuration stays in force.
package configfile

import (
	"bytes"
	"context"
	"crypto/sha256"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/fsnotify/fsnotify"

	"github.com/evictiond/evictiond/internal/policy"
)

// Load reads and compiles the configuration at path.
func Load(path string) (*policy.Config, []byte, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, nil, fmt.Errorf("reading configuration %s: %w", path, err)
	}
	cfg, errs := policy.Load(data)
	if errs != nil {
		return nil, data, errs
	}
	return cfg, data, nil
}

// Watcher reloads the file on change.
type Watcher struct {
	Path string
	// Resync re-reads the file this often even without a filesystem event
	// (a safety net for missed events). Default 10s.
	Resync time.Duration
	// Accepted, when set, receives every new valid document before Apply.
	Accepted func(data []byte)
	// Apply receives every new valid configuration.
	Apply func(*policy.Config)
	// Reject receives the problems of every new invalid file; the previous
	// configuration stays in force.
	Reject func(error)
	Log    *slog.Logger

	lastSum    [sha256.Size]byte
	ready      chan struct{}
	readyOnce  sync.Once
	readyClose sync.Once
}

// Ready is closed once Run watches the file (or has fallen back to polling):
// a change written after that is seen.
func (w *Watcher) Ready() <-chan struct{} {
	w.readyOnce.Do(func() { w.ready = make(chan struct{}) })
	return w.ready
}

// Seed records the contents already applied, so the first pass does not
// reload them.
func (w *Watcher) Seed(data []byte) { w.lastSum = sha256.Sum256(data) }

// Run watches until ctx ends. It never returns an error for a bad file; it
// returns one only when the watch itself cannot be set up and polling is
// impossible too.
func (w *Watcher) Run(ctx context.Context) error {
	resync := w.Resync
	if resync <= 0 {
		resync = 10 * time.Second
	}
	log := w.Log
	if log == nil {
		log = slog.Default()
	}
	var events <-chan fsnotify.Event
	var errs <-chan error
	fw, err := fsnotify.NewWatcher()
	if err == nil {
		// Watch the directory: the kubelet swaps a symlink there, and editors
		// replace files by rename; a watch on the file itself would be lost.
		if err = fw.Add(filepath.Dir(w.Path)); err == nil {
			events, errs = fw.Events, fw.Errors
			defer fw.Close()
		} else {
			fw.Close()
		}
	}
	if err != nil {
		log.Warn("config watch unavailable, polling instead", "path", w.Path, "interval", resync, "err", err)
	}
	tick := time.NewTicker(resync)
	defer tick.Stop()
	w.Ready()
	w.readyClose.Do(func() { close(w.ready) })
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-events:
			// Coalesce the burst of events one update produces.
			time.Sleep(50 * time.Millisecond)
			drain(events)
			w.check(log)
		case err := <-errs:
			log.Warn("config watch error", "path", w.Path, "err", err)
		case <-tick.C:
			w.check(log)
		}
	}
}

func drain(ch <-chan fsnotify.Event) {
	for {
		select {
		case <-ch:
		default:
			return
		}
	}
}

// check reloads the file if its contents changed.
func (w *Watcher) check(log *slog.Logger) {
	data, err := os.ReadFile(w.Path)
	if err != nil {
		// A missing file mid-swap, or a deleted ConfigMap: keep the last good config.
		log.Warn("config file unreadable, keeping the configuration in force", "path", w.Path, "err", err)
		return
	}
	sum := sha256.Sum256(data)
	if bytes.Equal(sum[:], w.lastSum[:]) {
		return
	}
	w.lastSum = sum
	cfg, ferrs := policy.Load(data)
	if ferrs != nil {
		if w.Reject != nil {
			w.Reject(ferrs)
		}
		return
	}
	if w.Accepted != nil {
		w.Accepted(data)
	}
	if w.Apply != nil {
		w.Apply(cfg)
	}
}
