package monitor

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

func TestDuDirCountsBlocksAndInodesAndHardLinksOnce(t *testing.T) {
	dir := t.TempDir()
	data := make([]byte, 64<<10)
	for i := range data {
		data[i] = byte(i) // not sparse
	}
	if err := os.WriteFile(filepath.Join(dir, "a"), data, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(dir, "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Link(filepath.Join(dir, "a"), filepath.Join(dir, "sub", "a-link")); err != nil {
		t.Fatal(err)
	}
	u, err := duDir(dir, 0)
	if err != nil {
		t.Fatal(err)
	}
	var want int64
	for _, p := range []string{dir, filepath.Join(dir, "a"), filepath.Join(dir, "sub")} {
		st, err := os.Lstat(p)
		if err != nil {
			t.Fatal(err)
		}
		want += st.Sys().(*syscall.Stat_t).Blocks * 512
	}
	if u.bytes != want {
		t.Errorf("bytes %d, want %d (dir, file once, subdir)", u.bytes, want)
	}
	if u.inodes != 3 {
		t.Errorf("inodes %d, want 3 (the hard link is the same inode)", u.inodes)
	}
}

func TestDuDirOverItsBoundIsAnErrorNotAPartialFigure(t *testing.T) {
	dir := t.TempDir()
	for i := 0; i < 10; i++ {
		if err := os.WriteFile(filepath.Join(dir, string(rune('a'+i))), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	_, err := duDir(dir, 5)
	if err == nil || !strings.Contains(err.Error(), "more than 5 entries") {
		t.Fatalf("error %v, want the bound named", err)
	}
	if _, err := duDir(filepath.Join(dir, "missing"), 5); err == nil {
		t.Error("a missing directory measured without error")
	}
}
