//go:build nodev2

package nodev2

import (
	"encoding/json"
	"regexp"
	"strconv"
	"testing"
)

// testHugepages reserves a hugetlb pool on the node (64 × 2 MiB) and reads memory.available
// with `evictiond observe` before and after: the pool is counted as used (it is in MemTotal
// and in no memory cgroup's usage, so the kubelet's MemTotal − working set leaves it
// available, kubernetes#137984).
func testHugepages(t *testing.T, n *node) {
	read := func() (available, pool int64) {
		t.Helper()
		var out struct {
			Signals []struct {
				Signal      string `json:"signal"`
				Available   int64  `json:"available"`
				Description string `json:"description"`
			} `json:"signals"`
		}
		raw := n.sh(t, "evictiond observe --once -o json --no-cadvisor 2>/dev/null")
		if err := json.Unmarshal([]byte(raw), &out); err != nil {
			t.Fatalf("evictiond observe: %v\n%s", err, raw)
		}
		for _, s := range out.Signals {
			if s.Signal == "memory.available" {
				m := regexp.MustCompile(`hugetlb pools (\d+)`).FindStringSubmatch(s.Description)
				if m == nil {
					t.Fatalf("memory.available's description does not name the hugetlb pools: %q", s.Description)
				}
				pool, _ = strconv.ParseInt(m[1], 10, 64)
				return s.Available, pool
			}
		}
		t.Fatalf("evictiond observe has no memory.available:\n%s", raw)
		return 0, 0
	}
	before, poolBefore := read()
	got, err := strconv.ParseInt(n.sh(t, "echo 64 > /proc/sys/vm/nr_hugepages && cat /proc/sys/vm/nr_hugepages"), 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	defer n.sh(t, "echo 0 > /proc/sys/vm/nr_hugepages")
	after, pool := read()
	want := got * 2 << 20
	t.Logf("%d hugepages of 2 MiB reserved: memory.available %d MiB -> %d MiB, hugetlb pools %d -> %d MiB (the kubelet's formula: %d MiB)",
		got, before>>20, after>>20, poolBefore>>20, pool>>20, (after+pool)>>20)
	if pool-poolBefore != want {
		t.Errorf("hugetlb pools read %d bytes more, want %d (%d pages)", pool-poolBefore, want, got)
	}
	// Other processes move the working set by a few MiB between the two readings.
	if drop := before - after; drop < want-32<<20 || drop > want+32<<20 {
		t.Errorf("memory.available fell by %d MiB when %d MiB of hugepages were reserved", drop>>20, want>>20)
	}
}
