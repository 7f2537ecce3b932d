// Package confine narrows what the agent's own process may do, once, at
// start and before it reads any input (configuration, API objects, node
// files), beyond what its pod's security context can express:
//
//   - a seccomp filter, stacked on the runtime's RuntimeDefault on every
//     thread, that refuses open_by_handle_at and name_to_handle_at with
//     EPERM. RuntimeDefault allows them to holders of CAP_DAC_READ_SEARCH,
//     which the agent needs to measure other users' emptyDir volumes; with
//     it, open_by_handle_at opens any inode of a mounted filesystem, for
//     writing too, through the agent's read-write host mounts: the classic
//     container escape. The agent never makes either call.
//   - on a cgroup v2 node whose kernel has cgroup.kill, CAP_KILL dropped
//     from the effective, permitted and inheritable sets of every thread:
//     the brake kills through cgroup.kill there, which needs no capability.
//     On cgroup v1 (and v2 without cgroup.kill) the brake kills with kill(2)
//     and the capability is kept.
//
// Both are one-way: a thread cannot remove a seccomp filter, and a dropped
// capability cannot come back (no_new_privs, set by allowPrivilegeEscalation:
// false, keeps setuid and file capabilities from restoring it across exec).
// They cover the agent and every process it would start; a process started
// in the pod by `kubectl exec` is not a descendant and is not covered.
package confine

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// Control names one confinement, as the metric's label says it.
type Control string

const (
	// Seccomp is the filter refusing open_by_handle_at and name_to_handle_at.
	Seccomp Control = "seccomp"
	// CapKill is CAP_KILL dropped on cgroup v2.
	CapKill Control = "cap_kill"
)

// Controls are every control, in the order they are applied.
var Controls = []Control{Seccomp, CapKill}

// Outcome is what one control came to.
type Outcome struct {
	Control Control
	// Applied: the control is in force on every thread of the process.
	Applied bool
	// Err is why a control that applies to this node could not be put in
	// force; nil when Applied, or when the control does not apply (Detail).
	Err error
	// Detail says what was done, or why the control does not apply here.
	Detail string
}

// Failed reports a control that applies here but is not in force.
func (o Outcome) Failed() bool { return o.Err != nil }

// Report is the outcome of every control.
type Report []Outcome

// Err joins the failures; nil when every control that applies is in force.
func (r Report) Err() error {
	var errs []error
	for _, o := range r {
		if o.Err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", o.Control, o.Err))
		}
	}
	return errors.Join(errs...)
}

// Apply puts every control in force that applies to this node; cgroupMount
// is the host's cgroup mount as the process sees it (/host/sys/fs/cgroup in
// the DaemonSet). A control that fails does not stop the others.
func Apply(cgroupMount string) Report {
	return Report{applySeccomp(), applyCapKill(cgroupMount)}
}

func applySeccomp() Outcome {
	o := Outcome{Control: Seccomp}
	threads, err := InstallSeccomp()
	if err != nil {
		o.Err = err
		return o
	}
	o.Applied = true
	o.Detail = fmt.Sprintf("open_by_handle_at and name_to_handle_at refused (EPERM) on all %d threads", threads)
	return o
}

func applyCapKill(cgroupMount string) Outcome {
	o := Outcome{Control: CapKill}
	needed, why := CapKillNeeded(cgroupMount)
	if needed {
		o.Detail = "CAP_KILL kept: " + why
		return o
	}
	threads, err := DropCapKill()
	if err != nil {
		o.Err = fmt.Errorf("%s, but: %w", why, err)
		return o
	}
	o.Applied = true
	o.Detail = fmt.Sprintf("CAP_KILL dropped on all %d threads: %s", threads, why)
	return o
}

// CapKillNeeded says whether the brake needs kill(2), hence CAP_KILL, on the
// node whose cgroup mount this is: on cgroup v1, and on cgroup v2 before
// Linux 5.14 (no cgroup.kill), it does; on cgroup v2 with cgroup.kill it
// does not. The answer comes from the kernel's files, not from configuration:
// the mount's root has cgroup.controllers on v2 (as monitor detects it), and
// cgroup.kill exists in every non-root cgroup of a kernel that has it.
func CapKillNeeded(cgroupMount string) (bool, string) {
	if _, err := os.Stat(filepath.Join(cgroupMount, "cgroup.controllers")); err != nil {
		return true, fmt.Sprintf("%s is not cgroup v2 (no cgroup.controllers): the brake kills with kill(2)", cgroupMount)
	}
	entries, err := os.ReadDir(cgroupMount)
	if err != nil {
		return true, fmt.Sprintf("cgroup v2, but listing %s: %v", cgroupMount, err)
	}
	for _, e := range entries {
		if !e.IsDir() {
			continue
		}
		if _, err := os.Stat(filepath.Join(cgroupMount, e.Name(), "cgroup.kill")); err == nil {
			return false, fmt.Sprintf("cgroup v2 with cgroup.kill (%s): the brake kills without it", filepath.Join(cgroupMount, e.Name(), "cgroup.kill"))
		}
		// One child cgroup answers for the kernel.
		return true, fmt.Sprintf("cgroup v2 without cgroup.kill (Linux before 5.14: no %s): the brake kills with kill(2)", filepath.Join(cgroupMount, e.Name(), "cgroup.kill"))
	}
	return true, fmt.Sprintf("cgroup v2, but %s has no child cgroup to tell whether the kernel has cgroup.kill", cgroupMount)
}

// ThreadStatus is one thread's seccomp and capability state, from
// /proc/self/task/<tid>/status.
type ThreadStatus struct {
	TID int
	// SeccompFilters is Seccomp_filters (Linux 5.9+); -1 when absent.
	SeccompFilters int
	// Seccomp is the mode: 0 none, 1 strict, 2 filter.
	Seccomp                        int
	NoNewPrivs                     bool
	CapInh, CapPrm, CapEff, CapBnd uint64
}

// Threads reads the status of every thread of the process proc (a
// /proc/<pid> directory, /proc/self for this one).
func Threads(proc string) ([]ThreadStatus, error) {
	entries, err := os.ReadDir(filepath.Join(proc, "task"))
	if err != nil {
		return nil, err
	}
	var out []ThreadStatus
	for _, e := range entries {
		tid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		data, err := os.ReadFile(filepath.Join(proc, "task", e.Name(), "status"))
		if errors.Is(err, os.ErrNotExist) {
			continue // the thread exited
		}
		if err != nil {
			return nil, err
		}
		st, err := ParseStatus(string(data))
		if err != nil {
			return nil, fmt.Errorf("thread %d: %w", tid, err)
		}
		st.TID = tid
		out = append(out, st)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%s/task: no thread", proc)
	}
	return out, nil
}

// ParseStatus reads the fields of a /proc status file ThreadStatus holds.
func ParseStatus(status string) (ThreadStatus, error) {
	st := ThreadStatus{SeccompFilters: -1, Seccomp: -1}
	for _, line := range strings.Split(status, "\n") {
		key, val, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		val = strings.TrimSpace(val)
		var err error
		switch key {
		case "Seccomp":
			st.Seccomp, err = strconv.Atoi(val)
		case "Seccomp_filters":
			st.SeccompFilters, err = strconv.Atoi(val)
		case "NoNewPrivs":
			st.NoNewPrivs = val == "1"
		case "CapInh":
			st.CapInh, err = strconv.ParseUint(val, 16, 64)
		case "CapPrm":
			st.CapPrm, err = strconv.ParseUint(val, 16, 64)
		case "CapEff":
			st.CapEff, err = strconv.ParseUint(val, 16, 64)
		case "CapBnd":
			st.CapBnd, err = strconv.ParseUint(val, 16, 64)
		default:
			continue
		}
		if err != nil {
			return st, fmt.Errorf("%s: value %q: %w", key, val, err)
		}
	}
	if st.Seccomp < 0 {
		return st, errors.New("no Seccomp field")
	}
	return st, nil
}
