//go:build e2e

package cluster

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// kubepodsPIDsDir is the kubelet's pods cgroup in the cgroup v1 pids hierarchy.
const kubepodsPIDsDir = "/sys/fs/cgroup/pids/kubepods"

// NodePIDCapacity is the node's PID capacity as the kubelet and evictiond compute it:
// min(kernel.pid_max, kernel.threads-max).
func NodePIDCapacity() (int64, error) {
	pidMax, err := readInt("/proc/sys/kernel/pid_max")
	if err != nil {
		return 0, err
	}
	threadsMax, err := readInt("/proc/sys/kernel/threads-max")
	if err != nil {
		return 0, err
	}
	return min(pidMax, threadsMax), nil
}

// PIDs is one reading of the node's tasks and of the kubepods pids cgroup.
type PIDs struct {
	At time.Time
	// NodeTasks is the task count of /proc/loadavg (threads included), what pid.available
	// subtracts from NodePIDCapacity.
	NodeTasks int64
	// PodsCurrent and PodsMax are kubepods' pids.current and pids.max (-1: "max").
	PodsCurrent, PodsMax int64
}

// PodsLeft is how many more tasks kubepods' pids.max admits; -1 when it has no limit.
func (p PIDs) PodsLeft() int64 {
	if p.PodsMax < 0 {
		return -1
	}
	return p.PodsMax - p.PodsCurrent
}

// NodeTasks is the machine's task count, threads included (/proc/loadavg's total).
func NodeTasks() (int64, error) {
	data, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return 0, err
	}
	fields := strings.Fields(string(data))
	if len(fields) < 4 {
		return 0, fmt.Errorf("/proc/loadavg: %q", data)
	}
	_, total, _ := strings.Cut(fields[3], "/")
	n, err := strconv.ParseInt(total, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("/proc/loadavg: %q: %w", data, err)
	}
	return n, nil
}

// ReadPIDs reads /proc/loadavg and the kubepods pids cgroup (which the kubelet creates):
// cheap enough to sample every few milliseconds.
func ReadPIDs() (PIDs, error) {
	p := PIDs{At: time.Now()}
	var err error
	if p.NodeTasks, err = NodeTasks(); err != nil {
		return p, err
	}
	if p.PodsCurrent, err = readInt(kubepodsPIDsDir + "/pids.current"); err != nil {
		return p, err
	}
	raw, err := os.ReadFile(kubepodsPIDsDir + "/pids.max")
	if err != nil {
		return p, err
	}
	if v := strings.TrimSpace(string(raw)); v == "max" {
		p.PodsMax = -1
	} else if p.PodsMax, err = strconv.ParseInt(v, 10, 64); err != nil {
		return p, fmt.Errorf("%s/pids.max = %q: %w", kubepodsPIDsDir, v, err)
	}
	return p, nil
}

// CPUThrottling is a pod's CFS throttling so far (cgroup v1 cpu.stat): how many periods it
// was throttled in and for how long in all.
type CPUThrottling struct {
	Periods, Throttled int64
	ThrottledTime      time.Duration
}

// PodCPUThrottling reads the cpu.stat of the pod's cgroup (any QoS class).
func PodCPUThrottling(uid string) (CPUThrottling, error) {
	dir, err := podCPUDir(uid)
	if err != nil {
		return CPUThrottling{}, err
	}
	stat, err := readKeyed(filepath.Join(dir, "cpu.stat"))
	if err != nil {
		return CPUThrottling{}, err
	}
	return CPUThrottling{Periods: stat["nr_periods"], Throttled: stat["nr_throttled"], ThrottledTime: time.Duration(stat["throttled_time"])}, nil
}

// podCPUDir is the pod's cgroup v1 cpu controller directory (any QoS class).
func podCPUDir(uid string) (string, error) {
	for _, qos := range []string{"", "burstable/", "besteffort/"} {
		dir := "/sys/fs/cgroup/cpu/kubepods/" + qos + "pod" + uid
		if _, err := os.Stat(filepath.Join(dir, "cpu.shares")); err == nil {
			return dir, nil
		}
	}
	return "", fmt.Errorf("no cpu cgroup for pod %s under /sys/fs/cgroup/cpu/kubepods", uid)
}

// PodRunQueueWait is how long the pod's threads have waited, runnable, for a CPU so far: the
// sum of the second field of /proc/<pid>/task/<tid>/schedstat over the tasks of the pod's cgroup
// and its containers' (threads that exited are not counted). Under CPU contention it is the time the pod lost to
// others; its CPU weight (cpu.shares, from its CPU request) decides how much.
func PodRunQueueWait(uid string) (time.Duration, error) {
	dir, err := podCPUDir(uid)
	if err != nil {
		return 0, err
	}
	// On cgroup v1 the processes are in the containers' child cgroups, not the pod's own.
	var pids []string
	err = filepath.WalkDir(dir, func(path string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() || d.Name() != "cgroup.procs" {
			return nil
		}
		if b, err := os.ReadFile(path); err == nil {
			pids = append(pids, strings.Fields(string(b))...)
		}
		return nil
	})
	if err != nil {
		return 0, err
	}
	var wait int64
	for _, pid := range pids {
		stats, _ := filepath.Glob("/proc/" + pid + "/task/*/schedstat")
		for _, f := range stats {
			b, err := os.ReadFile(f)
			if err != nil {
				continue // the thread exited
			}
			if fields := strings.Fields(string(b)); len(fields) >= 2 {
				n, _ := strconv.ParseInt(fields[1], 10, 64)
				wait += n
			}
		}
	}
	return time.Duration(wait), nil
}

// SetPodCPUShares overrides the pod cgroup's cpu.shares (its CPU weight under contention), for
// experiments on how much CPU priority a pod needs; the kubelet set it from the CPU request.
func SetPodCPUShares(uid string, shares int64) error {
	dir, err := podCPUDir(uid)
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "cpu.shares"), []byte(strconv.FormatInt(shares, 10)), 0o644)
}
