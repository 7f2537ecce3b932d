// Package statefile writes and reads the small files evictiond keeps on the
// node (the local-stop journal, the image GC state) so that a crash at any
// point leaves either the old file or the new one, never a torn one, and a
// damaged file is set aside for the operator instead of stopping the agent.
package statefile

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// ErrTooLarge is returned by Read for a file over its size cap.
var ErrTooLarge = errors.New("file too large")

// tempPrefix names the temporary files of WriteAtomic for path, so that
// RemoveTemps finds those a crash left behind.
func tempPrefix(path string) string { return "." + filepath.Base(path) + ".tmp-" }

// WriteAtomic replaces path with data: a temporary file in the same directory
// (created if missing), written, fsynced, renamed over path, then the directory
// fsynced so the rename itself survives a power loss. A crash before the rename
// leaves the old file and a temporary one (RemoveTemps); after it, the new file.
func WriteAtomic(path string, data []byte, perm fs.FileMode) error {
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("creating %s: %w", dir, err)
	}
	tmp, err := os.CreateTemp(dir, tempPrefix(path)+"*")
	if err != nil {
		return fmt.Errorf("creating a temporary file in %s: %w", dir, err)
	}
	committed := false
	defer func() {
		if !committed {
			tmp.Close()
			os.Remove(tmp.Name())
		}
	}()
	if _, err := tmp.Write(data); err != nil {
		return fmt.Errorf("writing %s: %w", tmp.Name(), err)
	}
	if err := tmp.Chmod(perm); err != nil {
		return fmt.Errorf("chmod %s: %w", tmp.Name(), err)
	}
	if err := tmp.Sync(); err != nil {
		return fmt.Errorf("fsync %s: %w", tmp.Name(), err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("closing %s: %w", tmp.Name(), err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("renaming %s to %s: %w", tmp.Name(), path, err)
	}
	committed = true
	return syncDir(dir)
}

// Remove deletes path, durably (the directory is fsynced); a missing file is
// not an error.
func Remove(path string) error {
	if err := os.Remove(path); err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		return fmt.Errorf("removing %s: %w", path, err)
	}
	return syncDir(filepath.Dir(path))
}

// Read returns the contents of path, at most max bytes: a larger file is
// ErrTooLarge, read no further. A missing file is fs.ErrNotExist.
func Read(path string, max int64) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, max+1))
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", path, err)
	}
	if int64(len(data)) > max {
		return nil, fmt.Errorf("%s: more than %d bytes: %w", path, max, ErrTooLarge)
	}
	return data, nil
}

// MoveAside renames a damaged file to path.corrupt-<UTC time> in its
// directory, kept for the operator, and returns the new name.
func MoveAside(path string, now time.Time) (string, error) {
	aside := path + ".corrupt-" + now.UTC().Format("20060102T150405Z")
	if err := os.Rename(path, aside); err != nil {
		return "", fmt.Errorf("moving %s aside: %w", path, err)
	}
	return aside, syncDir(filepath.Dir(path))
}

// RemoveTemps deletes the temporary files a crashed WriteAtomic of path left
// in its directory, and returns their names. They are never read: the rename
// that would have made one the file did not happen.
func RemoveTemps(path string) ([]string, error) {
	dir := filepath.Dir(path)
	entries, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("listing %s: %w", dir, err)
	}
	var removed []string
	for _, e := range entries {
		if !e.Type().IsRegular() || !strings.HasPrefix(e.Name(), tempPrefix(path)) {
			continue
		}
		name := filepath.Join(dir, e.Name())
		if err := os.Remove(name); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return removed, fmt.Errorf("removing %s: %w", name, err)
		}
		removed = append(removed, name)
	}
	return removed, nil
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("opening %s to fsync: %w", dir, err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("fsync %s: %w", dir, err)
	}
	return nil
}
