//go:build e2e

package cluster

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// KubeletPid is the kubelet's process on the host (0 when it is not running).
func (c *Cluster) KubeletPid() int { return c.kubelet.Pid() }

// ProcessOfPod finds the host process named comm in the pod with this UID (its cgroup
// path names the pod, with dashes on cgroupfs and underscores on systemd).
func ProcessOfPod(comm, podUID string) (int, error) {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return 0, err
	}
	marks := []string{"pod" + podUID, "pod" + strings.ReplaceAll(podUID, "-", "_")}
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		name, err := os.ReadFile(filepath.Join("/proc", e.Name(), "comm"))
		if err != nil || strings.TrimSpace(string(name)) != comm {
			continue
		}
		cg, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cgroup"))
		if err != nil {
			continue
		}
		for _, m := range marks {
			if bytes.Contains(cg, []byte(m)) {
				return pid, nil
			}
		}
	}
	return 0, fmt.Errorf("no process %q in a cgroup of pod %s", comm, podUID)
}

// ProcCPUTicks is the process's user and system CPU time in clock ticks (USER_HZ, 100
// on Linux).
func ProcCPUTicks(pid int) (int64, error) {
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

// ProcRSSBytes is the process's resident memory (VmRSS).
func ProcRSSBytes(pid int) (int64, error) {
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
