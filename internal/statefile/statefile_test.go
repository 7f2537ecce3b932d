package statefile

import (
	"bytes"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"
)

func TestWriteAtomicReplacesTheFileAndLeavesNoTemporary(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "state") // created by the write
	path := filepath.Join(dir, "s.json")
	for _, content := range []string{"first", "second, longer than the first"} {
		if err := WriteAtomic(path, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		got, err := os.ReadFile(path)
		if err != nil || string(got) != content {
			t.Fatalf("after writing %q: %q, %v", content, got, err)
		}
	}
	st, err := os.Stat(path)
	if err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("mode %v, %v; want 0600", st.Mode(), err)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 1 {
		t.Fatalf("directory holds %d entries, want only the file", len(entries))
	}
}

func TestWriteAtomicFailureKeepsTheOldFile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "s.json")
	if err := WriteAtomic(path, []byte("old"), 0o644); err != nil {
		t.Fatal(err)
	}
	// The rename cannot replace a directory: the write fails after the
	// temporary file was written, as a full disk or a kill would make it.
	target := filepath.Join(dir, "d")
	if err := os.Mkdir(target, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(target, "x"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := WriteAtomic(target, []byte("new"), 0o644); err == nil {
		t.Fatal("renaming over a non-empty directory succeeded")
	}
	if got, _ := os.ReadFile(path); string(got) != "old" {
		t.Fatalf("old file = %q", got)
	}
	if temps, _ := filepath.Glob(filepath.Join(dir, ".d.tmp-*")); len(temps) != 0 {
		t.Fatalf("temporary files left by a failed write: %v", temps)
	}
}

func TestReadCapsTheSize(t *testing.T) {
	path := filepath.Join(t.TempDir(), "s.json")
	if _, err := Read(path, 10); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("missing file: %v, want fs.ErrNotExist", err)
	}
	if err := os.WriteFile(path, bytes.Repeat([]byte("x"), 10), 0o644); err != nil {
		t.Fatal(err)
	}
	if data, err := Read(path, 10); err != nil || len(data) != 10 {
		t.Fatalf("file at the cap: %d bytes, %v", len(data), err)
	}
	if _, err := Read(path, 9); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("file over the cap: %v, want ErrTooLarge", err)
	}
}

func TestMoveAsideAndRemoveTemps(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "s.json")
	for name, content := range map[string]string{"s.json": "bad", ".s.json.tmp-1": "half", ".s.json.tmp-2": "", ".other.json.tmp-1": "x", "keep": "y"} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	removed, err := RemoveTemps(path)
	if err != nil || len(removed) != 2 {
		t.Fatalf("RemoveTemps = %v, %v; want the two temporary files of s.json", removed, err)
	}
	aside, err := MoveAside(path, time.Date(2026, 11, 25, 19, 30, 0, 0, time.UTC))
	if err != nil || aside != path+".corrupt-20261125T193000Z" {
		t.Fatalf("MoveAside = %q, %v", aside, err)
	}
	entries, _ := os.ReadDir(dir)
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	want := []string{".other.json.tmp-1", "keep", "s.json.corrupt-20261125T193000Z"}
	if !slices.Equal(names, want) {
		t.Fatalf("directory = %v, want %v", names, want)
	}
	if err := Remove(path); err != nil {
		t.Fatalf("removing a missing file: %v", err)
	}
}
