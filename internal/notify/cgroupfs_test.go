package notify

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
)

func TestUsageThresholdIsCapacityMinusThresholdPlusInactiveFile(t *testing.T) {
	s := memcgSample{Capacity: 1000, Usage: 600, InactiveFile: 150, Limited: true}
	if got := usageThreshold(s, 100); got != 1050 {
		t.Fatalf("usageThreshold = %d, want 1000-100+150 = 1050", got)
	}
	if got := s.Available(); got != 550 {
		t.Fatalf("Available = %d, want 1000-(600-150) = 550", got)
	}
	if got := usageThreshold(memcgSample{Capacity: 100}, 500); got != 0 {
		t.Fatalf("usageThreshold below zero = %d, want clamped to 0", got)
	}
	if got := (memcgSample{Capacity: 100, Usage: 10, InactiveFile: 50}).Available(); got != 100 {
		t.Fatalf("Available with inactive_file > usage = %d, want capacity (working set clamped at 0)", got)
	}
}

func TestParseMemTotal(t *testing.T) {
	got, err := parseMemTotal([]byte("MemTotal:       24684092 kB\nMemFree:        20590612 kB\n"))
	if err != nil || got != 24684092*1024 {
		t.Fatalf("parseMemTotal = %d, %v; want %d", got, err, 24684092*1024)
	}
	if _, err := parseMemTotal([]byte("MemFree: 1 kB\n")); err == nil {
		t.Fatal("parseMemTotal accepted meminfo without MemTotal")
	}
	if _, err := parseMemTotal([]byte("MemTotal: 12 MB\n")); err == nil {
		t.Fatal("parseMemTotal accepted a unit other than kB")
	}
}

func TestMemoryEventsIncreasedIgnoresLow(t *testing.T) {
	before := parseFlatKeyed([]byte("low 0\nhigh 3\nmax 0\noom 0\noom_kill 0\noom_group_kill 0\n"))
	after := parseFlatKeyed([]byte("low 7\nhigh 3\nmax 1\noom 0\noom_kill 2\noom_group_kill 0\n"))
	if got := memoryEventsIncreased(before, after); !slices.Equal(got, []string{"max", "oom_kill"}) {
		t.Fatalf("memoryEventsIncreased = %v, want [max oom_kill]", got)
	}
	onlyLow := parseFlatKeyed([]byte("low 9\nhigh 3\nmax 0\noom 0\noom_kill 0\n"))
	if got := memoryEventsIncreased(before, onlyLow); got != nil {
		t.Fatalf("memoryEventsIncreased on low only = %v, want none", got)
	}
}

// The fixture is a cgroup v1 memcg directory as this project's CI machine
// (Debian 12, kernel 6.x, hybrid hierarchy) shows it.
func TestReadMemcgV1FixtureTree(t *testing.T) {
	dir := t.TempDir()
	write := func(name, content string) {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("memory.usage_in_bytes", "734003200\n")
	write("memory.limit_in_bytes", "1073741824\n")
	write("memory.stat", "cache 209715200\nrss 500000000\ninactive_file 1\ntotal_cache 209715200\ntotal_inactive_file 104857600\ntotal_active_file 1\n")
	write("meminfo", "MemTotal:       24684092 kB\n")

	s, err := readMemcgV1(dir, false, filepath.Join(dir, "meminfo"))
	if err != nil {
		t.Fatal(err)
	}
	want := memcgSample{Capacity: 1 << 30, Usage: 734003200, InactiveFile: 104857600, Limited: true}
	if s != want {
		t.Fatalf("readMemcgV1 = %+v, want %+v", s, want)
	}
	root, err := readMemcgV1(dir, true, filepath.Join(dir, "meminfo"))
	if err != nil || root.Capacity != 24684092*1024 {
		t.Fatalf("root capacity = %d, %v; want MemTotal %d", root.Capacity, err, 24684092*1024)
	}
	write("memory.limit_in_bytes", "9223372036854771712\n")
	unlimited, err := readMemcgV1(dir, false, filepath.Join(dir, "meminfo"))
	if err != nil || unlimited.Limited {
		t.Fatalf("unlimited memcg: Limited=%v err=%v, want not limited", unlimited.Limited, err)
	}
	write("memory.stat", "total_cache 1\n")
	if _, err := readMemcgV1(dir, false, filepath.Join(dir, "meminfo")); err == nil {
		t.Fatal("readMemcgV1 accepted memory.stat without total_inactive_file")
	}
}
