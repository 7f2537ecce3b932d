package monitor

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/evictiond/evictiond/internal/policy"
)

// A node with hugetlb pools reserved (here 64 × 2 MiB and 1 × 1 GiB, 4 of
// the 2 MiB pages surplus): memory.available counts them as used, the
// kubelet's formula would leave them available.
func TestMemoryAvailableCountsTheHugetlbPoolsAsUsed(t *testing.T) {
	root := t.TempDir()
	fixture, err := filepath.Abs("testdata/v2-systemd")
	if err != nil {
		t.Fatal(err)
	}
	for _, dir := range []string{"proc", "sys/fs"} {
		if err := os.MkdirAll(filepath.Dir(filepath.Join(root, dir)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(filepath.Join(fixture, dir), filepath.Join(root, dir)); err != nil {
			t.Fatal(err)
		}
	}
	pools := map[string][2]string{"hugepages-2048kB": {"64", "4"}, "hugepages-1048576kB": {"1", "0"}}
	for name, v := range pools {
		d := filepath.Join(root, "sys/kernel/mm/hugepages", name)
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
		for i, f := range []string{"nr_hugepages", "surplus_hugepages"} {
			if err := os.WriteFile(filepath.Join(d, f), []byte(v[i]+"\n"), 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	m, err := New(Config{HostRoot: root, CgroupDriver: CgroupDriverSystemd, DisableCAdvisor: true})
	if err != nil {
		t.Fatal(err)
	}
	pool := int64(68*2<<20 + 1<<30)
	wantObservation(t, m.ObserveMemory(), policy.SignalMemoryAvailable, fixtureMemTotal-fixtureRootWS-pool, fixtureMemTotal)
}
