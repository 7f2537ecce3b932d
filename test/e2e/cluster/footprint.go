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
