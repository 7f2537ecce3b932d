package monitor

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/prometheus/procfs"

	"github.com/evictiond/evictiond/internal/policy"
)

// readMeminfo reads what procfs.Meminfo reads from this machine's /proc and
// the fixtures' (procfs is the reference it replaced for speed).
func TestReadMeminfoAgreesWithProcfs(t *testing.T) {
	for _, dir := range []string{"/proc", "testdata/v2-systemd/proc"} {
		fs, err := procfs.NewFS(dir)
		if err != nil {
			t.Fatal(err)
		}
		want, err := fs.Meminfo()
		if err != nil {
			t.Fatal(err)
		}
		got, err := readMeminfo(nil, dir)
		if err != nil {
			t.Fatal(err)
		}
		// /proc changes between the two reads: MemTotal does not.
		if got.memTotal != int64(*want.MemTotalBytes) {
			t.Errorf("%s: MemTotal %d, procfs %d", dir, got.memTotal, *want.MemTotalBytes)
		}
		if want.MemAvailableBytes == nil || got.memAvailable < 0 {
			t.Errorf("%s: MemAvailable %d, procfs %v", dir, got.memAvailable, want.MemAvailableBytes)
		} else if dir != "/proc" && got.memAvailable != int64(*want.MemAvailableBytes) {
			t.Errorf("%s: MemAvailable %d, procfs %d", dir, got.memAvailable, *want.MemAvailableBytes)
		}
		if want.SwapTotalBytes == nil || got.swapTotal != int64(*want.SwapTotalBytes) {
			t.Errorf("%s: SwapTotal %d, procfs %v", dir, got.swapTotal, want.SwapTotalBytes)
		}
		if dir != "/proc" && (want.SwapFreeBytes == nil || got.swapFree != int64(*want.SwapFreeBytes)) {
			t.Errorf("%s: SwapFree %d, procfs %v", dir, got.swapFree, want.SwapFreeBytes)
		}
	}
}

func TestReadMeminfoRejectsWhatIsNotMeminfo(t *testing.T) {
	for _, raw := range []string{
		"",
		"MemFree: 100 kB\n",
		"MemTotal: 100\n",
		"MemTotal: -5 kB\n",
		"MemTotal: lots kB\n",
	} {
		dir := t.TempDir()
		if err := os.WriteFile(filepath.Join(dir, "meminfo"), []byte(raw), 0o644); err != nil {
			t.Fatal(err)
		}
		if m, err := readMeminfo(nil, dir); err == nil || !strings.Contains(err.Error(), "meminfo") {
			t.Errorf("%q: %+v, %v; want an error naming the file", raw, m, err)
		}
	}
}

func TestParsePSIRejectsWhatIsNotAStallPercentage(t *testing.T) {
	for _, raw := range []string{
		"",
		"full avg10=1.00 avg60=0.00 avg300=0.00 total=0\n",
		"some avg10=abc avg60=0.00 avg300=0.00 total=0\n",
		"some avg10=-1 avg60=0.00 avg300=0.00 total=0\n",
		"some avg10=NaN avg60=0.00 avg300=0.00 total=0\n",
		"some avg10 avg60=0.00\n",
	} {
		if r, err := parsePSI("memory.pressure", []byte(raw)); err == nil {
			t.Errorf("%q parsed as %+v", raw, r)
		}
	}
}

// FuzzParsePSI: whatever a pressure file holds, parsing never panics, and
// what it accepts gives headroom within [0, PSIScale].
func FuzzParsePSI(f *testing.F) {
	f.Add([]byte("some avg10=12.50 avg60=3.10 avg300=0.75 total=123456\nfull avg10=4.00 avg60=1.00 avg300=0.20 total=2345\n"))
	f.Add([]byte("some avg10=0.00 avg60=0.00 avg300=0.00 total=0\n"))
	f.Add([]byte("some avg10=100.00 avg60=99.99 avg300=1e2 total=1\n"))
	f.Fuzz(func(t *testing.T, raw []byte) {
		r, err := parsePSI("memory.pressure", raw)
		if err != nil {
			return
		}
		for sig, stall := range r.values(allocatablePSISignals) {
			h := psiHeadroom(stall)
			if h < 0 || h > policy.PSIScale {
				t.Fatalf("%s: stall %v gave headroom %d", sig, stall, h)
			}
		}
	})
}

// TestReadPodPressure_OOMKills reads a pod cgroup's memory.pressure, usage,
// limit and memory.events oom_kill from the v2 fixture; a pod without
// memory.events keeps its reading with OOMKills -1 (left out of the
// livelock check only).
func TestReadPodPressure_OOMKills(t *testing.T) {
	m, err := New(Config{HostRoot: "testdata/v2-systemd", CgroupDriver: CgroupDriverSystemd, DisableCAdvisor: true})
	if err != nil {
		t.Fatal(err)
	}
	read := func(p PodRef) *policy.PodMemoryPressure {
		t.Helper()
		cg, err := m.locatePod(p)
		if err != nil {
			t.Fatal(err)
		}
		return m.readPodPressure(cg)
	}
	got := read(fixturePods[0])
	want := policy.PodMemoryPressure{Some: [3]int64{1250, 410, 100}, Full: [3]int64{320, 100, 20}, Usage: 256 << 20, OOMKills: 2}
	if got == nil || *got != want {
		t.Fatalf("burstable pod: %+v, want %+v", got, want)
	}
	if be := read(fixturePods[2]); be == nil || be.OOMKills != -1 {
		t.Errorf("pod without memory.events: %+v, want OOMKills -1", be)
	}
}
