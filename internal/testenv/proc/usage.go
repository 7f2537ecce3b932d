package proc

import (
	"bytes"
	"fmt"
	"os"
	"strconv"
	"strings"
)

// CPUTicks is the process's user and system CPU time in clock ticks (USER_HZ, 100
// on Linux).
func CPUTicks(pid int) (int64, error) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// Fields after the command name (which may hold spaces): utime is field 14, stime 15.
	rest := strings.Fields(string(data[bytes.LastIndexByte(data, ')')+2:]))
	if len(rest) < 13 {
		return 0, fmt.Errorf("/proc/%d/stat: %d fields after the name", pid, len(rest))
	}
	utime, err1 := strconv.ParseInt(rest[11], 10, 64)
	stime, err2 := strconv.ParseInt(rest[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, fmt.Errorf("/proc/%d/stat: utime %q, stime %q", pid, rest[11], rest[12])
	}
	return utime + stime, nil
}

// RSSBytes is the process's resident memory (VmRSS).
func RSSBytes(pid int) (int64, error) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(data), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kib, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			if err != nil {
				return 0, fmt.Errorf("/proc/%d/status: VmRSS %q", pid, v)
			}
			return kib << 10, nil
		}
	}
	return 0, fmt.Errorf("/proc/%d/status: no VmRSS", pid)
}

// SmapsRollupKiB is /proc/<pid>/smaps_rollup's fields in KiB ("Rss", "Anonymous", ...): the
// resident memory split into anonymous and file-backed pages.
func SmapsRollupKiB(pid int) (map[string]float64, error) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/smaps_rollup", pid))
	if err != nil {
		return nil, err
	}
	kib := map[string]float64{}
	for _, line := range strings.Split(string(data), "\n") {
		if f := strings.Fields(line); len(f) == 3 && f[2] == "kB" {
			kib[strings.TrimSuffix(f[0], ":")], _ = strconv.ParseFloat(f[1], 64)
		}
	}
	if _, ok := kib["Anonymous"]; !ok {
		return nil, fmt.Errorf("/proc/%d/smaps_rollup: no Anonymous field", pid)
	}
	return kib, nil
}
