package monitor

import (
	"math"
	"path/filepath"

	"github.com/evictiond/evictiond/internal/nodefs"
	"github.com/evictiond/evictiond/internal/policy"
)

// readPodPressure reads a pod cgroup's memory.pressure, memory.current,
// memory.max and memory.events oom_kill (cgroup v2 only: nil on v1 or when
// one of the first three cannot be read, which only leaves the pod out of the
// self-inflicted pressure and livelock checks; an unreadable memory.events
// leaves OOMKills at -1, which leaves it out of the livelock check alone).
func (m *Monitor) readPodPressure(podCgroup string) *policy.PodMemoryPressure {
	l := m.cgl()
	if l.version != CgroupV2 {
		return nil
	}
	dir := l.dir("memory", podCgroup)
	r, err := readPSIFile(m.files, filepath.Join(dir, "memory.pressure"))
	if err != nil {
		return nil
	}
	out := policy.PodMemoryPressure{Some: psiUnits(r.some), Full: psiUnits(r.full)}
	if out.Usage, err = m.files.ReadInt64(filepath.Join(dir, "memory.current")); err != nil {
		return nil
	}
	limit, err := m.files.ReadInt64(filepath.Join(dir, "memory.max"))
	if err != nil {
		return nil
	}
	if limit < nodefs.UnlimitedMemory {
		out.Limit = limit
	}
	if err := m.files.ReadStatKeys(filepath.Join(dir, "memory.events"), map[string]*int64{"oom_kill": &out.OOMKills}); err != nil {
		out.OOMKills = -1
	}
	return &out
}

// psiUnits is a PSI line's three windows in policy.PSIScale units; -1 each
// when the line is missing.
func psiUnits(l *psiLine) [3]int64 {
	if l == nil {
		return [3]int64{-1, -1, -1}
	}
	u := func(f float64) int64 { return int64(math.Round(f * 100)) }
	return [3]int64{u(l.avg10), u(l.avg60), u(l.avg300)}
}
