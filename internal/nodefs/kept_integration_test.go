//go:build integration

package nodefs

import (
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"testing"
)

// These tests run on this machine's real cgroup v1 memory hierarchy and procfs
// (as root): a kept file must read what a fresh open reads.

func v1MemoryCgroup(t *testing.T) string {
	t.Helper()
	root := "/sys/fs/cgroup/memory"
	if _, err := os.Stat(filepath.Join(root, "memory.limit_in_bytes")); err != nil {
		t.Fatalf("this test needs the cgroup v1 memory controller at %s (root): %v", root, err)
	}
	dir := filepath.Join(root, "evictiond-kept-test-"+strconv.Itoa(os.Getpid()))
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.Remove(dir) })
	return dir
}

func setLimit(t *testing.T, dir string, bytes int64) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(dir, "memory.limit_in_bytes"), []byte(strconv.FormatInt(bytes, 10)), 0o644); err != nil {
		t.Fatal(err)
	}
}

// A kept cgroup file reads each new value; removed and made again at the same
// path, it reads the new cgroup's value at the first read, without an error.
func TestKeptCgroupFileFollowsTheKernel(t *testing.T) {
	dir := v1MemoryCgroup(t)
	path := filepath.Join(dir, "memory.limit_in_bytes")
	f := NewFiles(func(string) bool { return true })
	defer f.Close()

	for _, want := range []int64{64 << 20, 128 << 20, 96 << 20} {
		setLimit(t, dir, want)
		got, err := f.ReadInt64(path)
		if err != nil {
			t.Fatal(err)
		}
		if got != want {
			t.Fatalf("kept %s reads %d after the limit was set to %d", path, got, want)
		}
		if len(f.Kept()) != 1 {
			t.Fatalf("%d files kept, want 1 (the cgroup file)", len(f.Kept()))
		}
	}

	if err := os.Remove(dir); err != nil {
		t.Fatal(err)
	}
	if _, err := f.ReadInt64(path); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("reading the removed cgroup's file: %v, want not-exist", err)
	}
	if len(f.Kept()) != 0 {
		t.Fatalf("%d files kept after the cgroup was removed, want 0", len(f.Kept()))
	}
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	setLimit(t, dir, 32<<20)
	if got, err := f.ReadInt64(path); err != nil || got != 32<<20 {
		t.Fatalf("the cgroup made again reads %d, %v; want %d", got, err, 32<<20)
	}
	// Kept from a read before the removal, the file reads the new cgroup too.
	if err := os.Remove(dir); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	setLimit(t, dir, 48<<20)
	if got, err := f.ReadInt64(path); err != nil || got != 48<<20 {
		t.Fatalf("a kept file of a cgroup removed and made again reads %d, %v; want %d", got, err, 48<<20)
	}
}

// memory.stat read through a kept file has the kernel's current figures:
// a page-cache file written into the cgroup shows in its cache.
func TestKeptMemoryStatFollowsTheKernel(t *testing.T) {
	dir := v1MemoryCgroup(t)
	f := NewFiles(func(string) bool { return true })
	defer f.Close()
	stat := filepath.Join(dir, "memory.stat")
	var before int64
	if err := f.ReadStatKeys(stat, map[string]*int64{"total_cache": &before}); err != nil {
		t.Fatal(err)
	}
	// Write 8 MiB of page cache from a child in the cgroup.
	data := filepath.Join(t.TempDir(), "cache")
	if err := os.WriteFile(filepath.Join(dir, "cgroup.procs"), []byte("0"), 0o644); err != nil {
		t.Fatal(err)
	}
	err := os.WriteFile(data, make([]byte, 8<<20), 0o644)
	// Back to the parent cgroup before anything else runs in this one.
	if werr := os.WriteFile("/sys/fs/cgroup/memory/cgroup.procs", []byte("0"), 0o644); werr != nil {
		t.Fatal(werr)
	}
	if err != nil {
		t.Fatal(err)
	}
	var after int64
	if err := f.ReadStatKeys(stat, map[string]*int64{"total_cache": &after}); err != nil {
		t.Fatal(err)
	}
	if after-before < 4<<20 {
		t.Fatalf("kept memory.stat: total_cache %d before writing 8 MiB, %d after", before, after)
	}
	if len(f.Kept()) != 1 {
		t.Fatalf("%d files kept, want 1", len(f.Kept()))
	}
}

// procfs files are kept; a regular file is not, and a new file renamed over
// it is read.
func TestOnlyKernelFilesAreKept(t *testing.T) {
	f := NewFiles(func(string) bool { return true })
	defer f.Close()
	buf := make([]byte, BufferSize)
	for range 2 {
		if raw, err := f.ReadSmallFile("/proc/loadavg", buf); err != nil || len(raw) == 0 {
			t.Fatalf("/proc/loadavg: %q, %v", raw, err)
		}
	}
	if len(f.Kept()) != 1 {
		t.Fatalf("%d files kept after reading /proc/loadavg twice, want 1", len(f.Kept()))
	}
	path := filepath.Join(t.TempDir(), "value")
	for _, v := range []string{"1", "2"} {
		tmp := path + ".tmp"
		if err := os.WriteFile(tmp, []byte(v), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, path); err != nil {
			t.Fatal(err)
		}
		if got, err := f.ReadInt64(path); err != nil || strconv.FormatInt(got, 10) != v {
			t.Fatalf("regular file replaced by a rename reads %d, %v; want %s", got, err, v)
		}
	}
	if len(f.Kept()) != 1 {
		t.Fatalf("%d files kept after reading a regular file, want 1 (/proc/loadavg only)", len(f.Kept()))
	}
}
