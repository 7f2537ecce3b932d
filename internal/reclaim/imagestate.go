package reclaim

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"time"

	"github.com/evictiond/evictiond/internal/statefile"
)

// imageStateVersion is the state file's format version.
const imageStateVersion = 1

// lastUsedPersistGranularity: a last-used time that moved by less than this since the value
// last marked for writing does not by itself cause a write. Tracking runs every loop pass;
// writing (with fsync) every second to a disk under pressure would be wasteful, and a restart
// losing under a minute of LRU precision is harmless (the kubelet's own tracking runs every 5m).
const lastUsedPersistGranularity = time.Minute

// imageRecord is what evictiond knows about one image that the runtime does not tell.
type imageRecord struct {
	// FirstSeen is when evictiond first listed the image (the kubelet's firstDetected).
	FirstSeen time.Time `json:"firstSeen"`
	// LastUsed is the last time evictiond saw a container using the image; zero if never.
	LastUsed time.Time `json:"lastUsed,omitzero"`
}

// imageStateFile is the on-disk form.
type imageStateFile struct {
	Version int                    `json:"version"`
	Images  map[string]imageRecord `json:"images"`
}

// imageState is the image records, persisted in a file on the host so that LRU order and
// minimum age survive an agent restart (the kubelet keeps them in memory only).
type imageState struct {
	path    string
	records map[string]imageRecord // by image ID
	dirty   bool
	// savedLastUsed is each image's last-used time as last written, against which
	// lastUsedPersistGranularity is measured.
	savedLastUsed map[string]time.Time
}

// maxImageStateBytes caps the state file read at start: a record is about 150
// bytes, so this holds a hundred thousand images; a larger file is not one
// evictiond wrote.
const maxImageStateBytes = 16 << 20

// loadImageState reads the state file. A missing file is an empty state. A file that cannot be
// decoded or is over maxImageStateBytes is moved aside (".corrupt-<time>", statefile.MoveAside)
// and replaced by an empty state: every image then counts as first seen now, which the minimum
// age protects, so the safe side is kept. Temporary files of an interrupted write are removed.
func loadImageState(path string, log *slog.Logger) (*imageState, error) {
	st := &imageState{path: path, records: map[string]imageRecord{}, savedLastUsed: map[string]time.Time{}}
	temps, err := statefile.RemoveTemps(path)
	if len(temps) > 0 {
		log.Info("removed the temporary files of an interrupted image state write", "path", path, "removed", temps)
	}
	if err != nil {
		return nil, err
	}
	data, err := statefile.Read(path, maxImageStateBytes)
	var file imageStateFile
	var decodeErr error
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return st, nil
	case errors.Is(err, statefile.ErrTooLarge):
		decodeErr = err
	case err != nil:
		return nil, fmt.Errorf("reading image state file %s: %w", path, err)
	default:
		decodeErr = json.Unmarshal(data, &file)
	}
	if decodeErr == nil && file.Version != imageStateVersion {
		decodeErr = fmt.Errorf("version %d: want %d", file.Version, imageStateVersion)
	}
	if decodeErr != nil {
		aside, err := statefile.MoveAside(path, time.Now())
		if err != nil {
			return nil, fmt.Errorf("moving unreadable image state file %s aside: %w", path, err)
		}
		log.Warn("image state file unreadable, starting with an empty state", "path", path, "movedTo", aside, "err", decodeErr)
		return st, nil
	}
	for id, rec := range file.Images {
		st.records[id] = rec
		st.savedLastUsed[id] = rec.LastUsed
	}
	return st, nil
}

// observe updates the records from one listing: new images are first seen now, images in use
// are last used now, records of images that no longer exist are dropped.
func (s *imageState) observe(present []string, inUse func(id string) bool, now time.Time) {
	seen := make(map[string]bool, len(present))
	for _, id := range present {
		seen[id] = true
		rec, ok := s.records[id]
		if !ok {
			rec = imageRecord{FirstSeen: now}
			s.dirty = true
		}
		if inUse(id) {
			if now.Sub(s.savedLastUsed[id]) >= lastUsedPersistGranularity {
				s.dirty = true
			}
			rec.LastUsed = now
		}
		s.records[id] = rec
	}
	for id := range s.records {
		if !seen[id] {
			delete(s.records, id)
			s.dirty = true
		}
	}
}

func (s *imageState) markUsed(id string, now time.Time) {
	rec := s.records[id]
	if rec.FirstSeen.IsZero() {
		rec.FirstSeen = now
	}
	rec.LastUsed = now
	s.records[id] = rec
	s.dirty = true
}

func (s *imageState) forget(id string) {
	if _, ok := s.records[id]; ok {
		delete(s.records, id)
		s.dirty = true
	}
}

// save writes the state atomically when it changed: a temporary file in the same directory,
// fsync, rename over the old file, fsync of the directory. A crash leaves either the old or
// the new file, never a torn one.
func (s *imageState) save() error {
	if !s.dirty {
		return nil
	}
	data, err := json.MarshalIndent(imageStateFile{Version: imageStateVersion, Images: s.records}, "", "  ")
	if err != nil {
		return fmt.Errorf("encoding image state: %w", err)
	}
	if err := statefile.WriteAtomic(s.path, data, 0o644); err != nil {
		return fmt.Errorf("writing image state file: %w", err)
	}
	s.dirty = false
	clear(s.savedLastUsed)
	for id, rec := range s.records {
		s.savedLastUsed[id] = rec.LastUsed
	}
	return nil
}
