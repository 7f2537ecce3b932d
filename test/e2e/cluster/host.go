//go:build e2e

package cluster

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// The kubelet and the CNI bridge plugin change host state outside the cluster's directory.
// hostState records that state before the cluster starts, and restore puts it back, so a run
// leaves the machine as it found it.

// kubeletSysctls are the kernel tunables the kubelet's container manager sets at start
// (pkg/kubelet/cm setupKernelTunables), plus IP forwarding, which the bridge plugin's
// isGateway turns on.
var kubeletSysctls = []string{
	"vm/overcommit_memory",
	"vm/panic_on_oom",
	"kernel/panic",
	"kernel/panic_on_oops",
	"kernel/keys/root_maxkeys",
	"kernel/keys/root_maxbytes",
	"net/ipv4/ip_forward",
}

// containerLogsDir is where the kubelet links container logs whatever its configuration
// (a package variable in the kubelet, not a setting).
const containerLogsDir = "/var/log/containers"

// cniCacheDir is libcni's result cache, which containerd (1.6 and 2.2 alike) does not let us move.
const cniCacheDir = "/var/lib/cni"

type hostState struct {
	sysctls             map[string]string
	hadContainerLogsDir bool
	hadCNICacheDir      bool
}

func snapshotHost() (*hostState, error) {
	h := &hostState{sysctls: map[string]string{}}
	for _, key := range kubeletSysctls {
		data, err := os.ReadFile(filepath.Join("/proc/sys", key))
		if err != nil {
			return nil, fmt.Errorf("reading sysctl %s: %w", key, err)
		}
		h.sysctls[key] = strings.TrimSpace(string(data))
	}
	h.hadContainerLogsDir = exists(containerLogsDir)
	h.hadCNICacheDir = exists(cniCacheDir)
	if existing := kubepodsCgroups(); len(existing) > 0 {
		// Another kubelet owns them (or a crashed run left them): starting a second one on top
		// would mix its pods with ours and tear down someone else's cgroups at the end.
		return nil, fmt.Errorf("kubepods cgroups already exist (%s): another kubelet runs on this machine, or a previous run was killed; "+
			"stop it, or remove them with `find /sys/fs/cgroup/*/kubepods -depth -type d -exec rmdir {} +`",
			strings.Join(existing, ", "))
	}
	return h, nil
}

// restore undoes what the kubelet and the CNI plugins changed. Every step runs whatever the
// previous ones returned; the errors are joined.
func (h *hostState) restore(podLogsDir, bridge string) error {
	var errs []error
	for key, value := range h.sysctls {
		path := filepath.Join("/proc/sys", key)
		if cur, err := os.ReadFile(path); err == nil && strings.TrimSpace(string(cur)) == value {
			continue
		}
		if err := os.WriteFile(path, []byte(value), 0o644); err != nil {
			errs = append(errs, fmt.Errorf("restoring sysctl %s=%s: %w", key, value, err))
		}
	}
	errs = append(errs, removeLinksInto(containerLogsDir, podLogsDir))
	if !h.hadContainerLogsDir {
		errs = append(errs, removeIfEmpty(containerLogsDir))
	}
	if !h.hadCNICacheDir {
		if err := os.RemoveAll(cniCacheDir); err != nil {
			errs = append(errs, fmt.Errorf("removing %s: %w", cniCacheDir, err))
		}
	}
	if bridge != "" {
		if _, err := os.Stat(filepath.Join("/sys/class/net", bridge)); err == nil {
			if out, err := exec.Command("ip", "link", "delete", bridge).CombinedOutput(); err != nil {
				errs = append(errs, fmt.Errorf("deleting bridge %s: %w: %s", bridge, err, out))
			}
		}
	}
	errs = append(errs, removeKubepodsCgroups())
	return errors.Join(errs...)
}

// kubepodsCgroups lists the kubelet's top-level pod cgroups in every mounted hierarchy.
func kubepodsCgroups() []string {
	matches, _ := filepath.Glob("/sys/fs/cgroup/*/kubepods")
	if exists("/sys/fs/cgroup/kubepods") { // a pure cgroup v2 machine
		matches = append(matches, "/sys/fs/cgroup/kubepods")
	}
	return matches
}

// removeKubepodsCgroups removes the kubelet's cgroup trees, deepest first. containerd's
// cleanup has removed every sandbox by then, but a container being created while containerd
// stopped leaves its `runc init` behind (parented to init, blocked on its exec fifo, seen after
// a scenario that keeps creating pods), and a pod frozen by the brake would keep its tasks: so
// every cgroup is thawed and whatever is left in the trees is killed first.
func removeKubepodsCgroups() error {
	var errs []error
	var trees [][]string
	for _, root := range kubepodsCgroups() {
		var dirs []string
		_ = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
			if err == nil && d.IsDir() {
				dirs = append(dirs, path)
			}
			return nil
		})
		sort.Slice(dirs, func(i, j int) bool { return len(dirs[i]) > len(dirs[j]) })
		trees = append(trees, dirs)
	}
	killStrays(trees)
	for _, dirs := range trees {
		for _, d := range dirs {
			if err := unix.Rmdir(d); err != nil && !errors.Is(err, unix.ENOENT) {
				errs = append(errs, fmt.Errorf("removing cgroup %s: %w", d, err))
			}
		}
	}
	return errors.Join(errs...)
}

// killStrays thaws every cgroup of the trees and SIGKILLs the processes still in them, then
// waits (bounded) until they are gone, so the cgroups can be removed.
func killStrays(trees [][]string) {
	pids := func() []int {
		var out []int
		for _, dirs := range trees {
			for _, d := range dirs {
				data, err := os.ReadFile(filepath.Join(d, "cgroup.procs"))
				if err != nil {
					continue
				}
				for _, f := range strings.Fields(string(data)) {
					if pid, err := strconv.Atoi(f); err == nil {
						out = append(out, pid)
					}
				}
			}
		}
		return out
	}
	for _, dirs := range trees {
		for _, d := range dirs {
			if state := filepath.Join(d, "freezer.state"); exists(state) {
				_ = os.WriteFile(state, []byte("THAWED"), 0o644)
			}
			if freeze := filepath.Join(d, "cgroup.freeze"); exists(freeze) {
				_ = os.WriteFile(freeze, []byte("0"), 0o644)
			}
		}
	}
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		left := pids()
		if len(left) == 0 {
			return
		}
		for _, pid := range left {
			_ = unix.Kill(pid, unix.SIGKILL)
		}
	}
}

// removeLinksInto removes the symlinks in dir that point below target.
func removeLinksInto(dir, target string) error {
	entries, err := os.ReadDir(dir)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		return fmt.Errorf("reading %s: %w", dir, err)
	}
	var errs []error
	for _, e := range entries {
		link := filepath.Join(dir, e.Name())
		dest, err := os.Readlink(link)
		if err != nil {
			continue
		}
		if strings.HasPrefix(dest, target+"/") {
			if err := os.Remove(link); err != nil {
				errs = append(errs, err)
			}
		}
	}
	return errors.Join(errs...)
}

func removeIfEmpty(dir string) error {
	if err := unix.Rmdir(dir); err != nil && !errors.Is(err, unix.ENOENT) && !errors.Is(err, unix.ENOTEMPTY) {
		return fmt.Errorf("removing %s: %w", dir, err)
	}
	return nil
}

// memTotalBytes is the machine's memory capacity as cAdvisor, and so the kubelet, sees it.
func memTotalBytes() (int64, error) {
	data, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		return 0, fmt.Errorf("reading /proc/meminfo: %w", err)
	}
	for _, line := range strings.Split(string(data), "\n") {
		if rest, ok := strings.CutPrefix(line, "MemTotal:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			if err != nil {
				return 0, fmt.Errorf("parsing MemTotal %q: %w", rest, err)
			}
			return kb * 1024, nil
		}
	}
	return 0, errors.New("/proc/meminfo has no MemTotal line")
}

func exists(path string) bool {
	_, err := os.Lstat(path)
	return err == nil
}
