package notify

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"strconv"
	"strings"

	"github.com/evictiond/evictiond/internal/nodefs"
)

// parseFlatKeyed parses cgroupfs "key value" lines (memory.stat,
// memory.events). Lines that do not parse are skipped: the kernel adds keys
// across versions and a reader must not break on them.
func parseFlatKeyed(data []byte) map[string]int64 {
	out := map[string]int64{}
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		key, value, ok := strings.Cut(sc.Text(), " ")
		if !ok {
			continue
		}
		v, err := strconv.ParseInt(strings.TrimSpace(value), 10, 64)
		if err != nil {
			continue
		}
		out[key] = v
	}
	return out
}

// readFlatKey reads one key of a flat-keyed cgroupfs file (memory.stat).
func readFlatKey(path, key string) (int64, error) {
	var v int64
	err := nodefs.ReadStatKeys(path, map[string]*int64{key: &v})
	return v, err
}

// parseMemTotal returns MemTotal in bytes from /proc/meminfo.
func parseMemTotal(data []byte) (int64, error) {
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		line := sc.Text()
		rest, ok := strings.CutPrefix(line, "MemTotal:")
		if !ok {
			continue
		}
		fields := strings.Fields(rest)
		if len(fields) != 2 || fields[1] != "kB" {
			return 0, fmt.Errorf("unexpected MemTotal line %q", line)
		}
		kb, err := strconv.ParseInt(fields[0], 10, 64)
		if err != nil {
			return 0, fmt.Errorf("MemTotal line %q: %w", line, err)
		}
		return kb * 1024, nil
	}
	return 0, fmt.Errorf("no MemTotal line")
}

// memcgSample is what arming a v1 threshold needs from one memcg.
type memcgSample struct {
	Capacity     int64 // memory.limit_in_bytes, or MemTotal for the root / no limit
	Usage        int64 // memory.usage_in_bytes
	InactiveFile int64 // memory.stat total_inactive_file
	Limited      bool  // the memcg (or the root) has a finite capacity
}

// Available is capacity - working set, the kubelet's formula.
func (s memcgSample) Available() int64 {
	return s.Capacity - nodefs.WorkingSet(s.Usage, s.InactiveFile)
}

// usageThreshold is memory.usage_in_bytes at which available memory falls
// to availableThreshold: capacity - threshold + inactive_file (the kubelet's
// "notify when working_set = capacity - eviction threshold").
func usageThreshold(s memcgSample, availableThreshold int64) int64 {
	v := s.Capacity - availableThreshold + s.InactiveFile
	if v < 0 {
		return 0
	}
	return v
}

// readMemcgV1 samples a v1 memcg directory. For the root memcg (isRoot),
// capacity is MemTotal, as cAdvisor reports it for "/".
func readMemcgV1(dir string, isRoot bool, meminfoPath string) (memcgSample, error) {
	var s memcgSample
	var err error
	if s.Usage, err = nodefs.ReadInt64(dir + "/memory.usage_in_bytes"); err != nil {
		return s, fmt.Errorf("reading memcg usage: %w", err)
	}
	if s.InactiveFile, err = readFlatKey(dir+"/memory.stat", "total_inactive_file"); err != nil {
		return s, fmt.Errorf("reading memcg inactive_file: %w", err)
	}
	meminfo, err := os.ReadFile(meminfoPath)
	if err != nil {
		return s, fmt.Errorf("reading machine memory: %w", err)
	}
	memTotal, err := parseMemTotal(meminfo)
	if err != nil {
		return s, fmt.Errorf("reading %s: %w", meminfoPath, err)
	}
	if isRoot {
		s.Capacity, s.Limited = memTotal, true
		return s, nil
	}
	limit, err := nodefs.ReadInt64(dir + "/memory.limit_in_bytes")
	if err != nil {
		return s, fmt.Errorf("reading memcg limit: %w", err)
	}
	s.Capacity, s.Limited = limit, limit < nodefs.UnlimitedMemory
	return s, nil
}

// memoryEventCounters are the memory.events keys that mean pressure: the
// memcg hit memory.high (reclaim throttling), memory.max (reclaim at the
// limit), or the OOM killer ran. "low" (protection breached) is not pressure
// of this cgroup.
var memoryEventCounters = []string{"high", "max", "oom", "oom_kill"}

// memoryEventsIncreased reports which pressure counters grew.
func memoryEventsIncreased(before, after map[string]int64) []string {
	var grew []string
	for _, k := range memoryEventCounters {
		if after[k] > before[k] {
			grew = append(grew, k)
		}
	}
	return grew
}
