//go:build e2e

package cluster

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"
)

// kubepodsMemoryDir is the kubelet's pods cgroup in the cgroup v1 memory hierarchy (this
// machine runs v1; the kubelet's cgroupRoot is "/").
const kubepodsMemoryDir = "/sys/fs/cgroup/memory/kubepods"

// PodsMemory is one reading of the kubepods memory cgroup, computed as the kubelet and
// evictiond compute allocatableMemory.available.
type PodsMemory struct {
	At time.Time
	// Usage is memory.usage_in_bytes; InactiveFile is memory.stat total_inactive_file.
	Usage, InactiveFile int64
	// WorkingSet is Usage - InactiveFile (floored at 0).
	WorkingSet int64
	// Limit is memory.limit_in_bytes.
	Limit int64
	// OOMKills is the machine's count of kernel OOM kills (/proc/vmstat oom_kill). The
	// cgroup v1 per-memcg counter does not help: it counts on the victim's own cgroup, which
	// is gone once the container is removed.
	OOMKills int64
}

// Available is what the allocatableMemory.available signal reports: limit - working set.
func (m PodsMemory) Available() int64 { return m.Limit - m.WorkingSet }

// ReadPodsMemory reads the kubepods memory cgroup. It costs a few tens of microseconds, so
// tests can sample it every few milliseconds.
func ReadPodsMemory() (PodsMemory, error) {
	m := PodsMemory{At: time.Now()}
	var err error
	if m.Usage, err = readInt(kubepodsMemoryDir + "/memory.usage_in_bytes"); err != nil {
		return m, err
	}
	if m.Limit, err = readInt(kubepodsMemoryDir + "/memory.limit_in_bytes"); err != nil {
		return m, err
	}
	stat, err := readKeyed(kubepodsMemoryDir + "/memory.stat")
	if err != nil {
		return m, err
	}
	m.InactiveFile = stat["total_inactive_file"]
	m.WorkingSet = max(m.Usage-m.InactiveFile, 0)
	vmstat, err := readKeyed("/proc/vmstat")
	if err != nil {
		return m, err
	}
	m.OOMKills = vmstat["oom_kill"]
	return m, nil
}

func readInt(path string) (int64, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return 0, fmt.Errorf("reading %s: %w", path, err)
	}
	v, err := strconv.ParseInt(strings.TrimSpace(string(data)), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("parsing %s = %q: %w", path, data, err)
	}
	return v, nil
}

// readKeyed parses "key value" lines (memory.stat, /proc/vmstat).
func readKeyed(path string) (map[string]int64, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", path, err)
	}
	out := map[string]int64{}
	for _, line := range strings.Split(string(data), "\n") {
		key, value, ok := strings.Cut(line, " ")
		if !ok {
			continue
		}
		if v, err := strconv.ParseInt(strings.TrimSpace(value), 10, 64); err == nil {
			out[key] = v
		}
	}
	return out, nil
}
