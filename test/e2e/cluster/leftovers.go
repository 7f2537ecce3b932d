//go:build e2e

package cluster

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/evictiond/evictiond/internal/testenv/proc"
)

// LeftoverPatterns are the directories a run of the e2e cluster (and of the
// control plane the other tiers start) lives in; a run that was killed before
// its cleanups leaves them, with their processes and mounts.
var LeftoverPatterns = []string{
	filepath.Join(os.TempDir(), "evictiond-e2e-*"),
	filepath.Join(os.TempDir(), "evictiond-apiserver-*"),
	"/dev/shm/evictiond-etcd-*",
}

// CleanLeftovers removes what interrupted runs left on this machine (`make
// e2e-clean`): the processes started from their directories (kubelet,
// containerd and its shims, etcd, the control plane), the kubepods cgroups
// (thawed, their tasks killed), the mounts under the directories, the CNI
// bridge, the container log links into them, and the directories. The caller
// holds every tier's lock: nothing may be running. It reports what it
// removed; the sysctls a killed kubelet changed cannot be known and stay.
func CleanLeftovers(report func(format string, args ...any)) error {
	var dirs []string
	for _, p := range LeftoverPatterns {
		m, _ := filepath.Glob(p)
		dirs = append(dirs, m...)
	}
	var errs []error
	killed := killProcessesUnder(dirs)
	for _, pid := range killed {
		report("killed process %d", pid)
	}
	if cg := kubepodsCgroups(); len(cg) > 0 {
		report("removing kubepods cgroups %s", strings.Join(cg, ", "))
		errs = append(errs, removeKubepodsCgroups())
	}
	for _, d := range dirs {
		errs = append(errs, proc.UnmountUnder(d))
		errs = append(errs, removeLinksInto(containerLogsDir, d))
	}
	if _, err := os.Stat(filepath.Join("/sys/class/net", BridgeName)); err == nil {
		report("deleting bridge %s", BridgeName)
		if out, err := exec.Command("ip", "link", "delete", BridgeName).CombinedOutput(); err != nil {
			errs = append(errs, fmt.Errorf("deleting bridge %s: %w: %s", BridgeName, err, out))
		}
	}
	for _, d := range dirs {
		report("removing %s", d)
		if err := os.RemoveAll(d); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// killProcessesUnder SIGKILLs every process whose command line or working
// directory names one of dirs, and waits (bounded) for them to be gone.
func killProcessesUnder(dirs []string) []int {
	if len(dirs) == 0 {
		return nil
	}
	self := os.Getpid()
	var pids []int
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == self {
			continue
		}
		cmdline, _ := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		cwd, _ := os.Readlink(filepath.Join("/proc", e.Name(), "cwd"))
		text := strings.ReplaceAll(string(cmdline), "\x00", " ") + " " + cwd
		for _, d := range dirs {
			if strings.Contains(text, d) {
				pids = append(pids, pid)
				break
			}
		}
	}
	for _, pid := range pids {
		_ = unix.Kill(pid, unix.SIGKILL)
	}
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		alive := 0
		for _, pid := range pids {
			if unix.Kill(pid, 0) == nil && !zombie(pid) {
				alive++
			}
		}
		if alive == 0 {
			break
		}
	}
	return pids
}

func zombie(pid int) bool {
	data, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		return true
	}
	s := string(data)
	i := strings.LastIndexByte(s, ')')
	return i < 0 || i+2 >= len(s) || s[i+2] == 'Z'
}
