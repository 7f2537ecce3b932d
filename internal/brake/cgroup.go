// Package brake stops a pod at kernel speed: it freezes the pod's cgroup
// (freezer.state on cgroup v1, cgroup.freeze on v2), thaws it, and kills
// every task in it (cgroup.kill on v2; on v1 SIGKILL to every process, then
// a thaw so the signals land). internal/policy decides when; the agent calls
// this package around the eviction request. The freezer handling is
// opencontainers/cgroups', the one runc uses.
package brake

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/opencontainers/cgroups"
	cgroupsfs "github.com/opencontainers/cgroups/fs"
	"github.com/opencontainers/cgroups/fs2"
)

// Version is a cgroup hierarchy version.
type Version int

const (
	V1 Version = 1
	V2 Version = 2
)

// PodCgroup is a pod's cgroup as the brake needs it.
type PodCgroup struct {
	Version Version
	// Dir is the pod's directory in the v1 freezer hierarchy
	// (/sys/fs/cgroup/freezer/kubepods/burstable/pod<uid>) or in the v2
	// unified hierarchy. The containers' cgroups are below it.
	Dir string
}

func (c PodCgroup) String() string { return fmt.Sprintf("cgroup v%d %s", c.Version, c.Dir) }

func (c PodCgroup) check() error {
	if c.Version != V1 && c.Version != V2 {
		return fmt.Errorf("pod cgroup %q: version %d: must be 1 or 2", c.Dir, c.Version)
	}
	if !filepath.IsAbs(c.Dir) {
		return fmt.Errorf("pod cgroup: dir %q: must be an absolute path", c.Dir)
	}
	file := "freezer.state"
	if c.Version == V2 {
		file = "cgroup.freeze"
	}
	if _, err := os.Stat(filepath.Join(c.Dir, file)); err != nil {
		return fmt.Errorf("pod cgroup %s: no %s (is the freezer controller mounted and the pod cgroup there?): %w", c.Dir, file, err)
	}
	return nil
}

// freezeSettle bounds how long Freeze waits for the kernel to report the
// cgroup frozen. A task stops at its next return to user space; one that
// stays in the kernel — allocating at its memory cgroup's limit, in direct
// reclaim, waiting for the OOM killer — keeps the cgroup FREEZING. On the
// e2e node with every CPU taken, a hog at kubepods' limit kept it FREEZING
// for the whole second Freeze used to wait, which then thawed it and left
// the eviction request a second late, to the OOM killer (issue 30). Past
// freezeSettle the freeze stays written (every task in user space is
// stopped, the rest stop as they leave the kernel, and SIGKILL ends them
// there) and Freeze returns ErrStillFreezing: the brake goes ahead.
const freezeSettle = 50 * time.Millisecond

// ErrStillFreezing: the freeze is written but a task of the cgroup had not
// left the kernel within freezeSettle. The cgroup is left freezing.
var ErrStillFreezing = errors.New("not frozen yet: a task has not left the kernel")

// Freeze freezes every task in the cgroup and its descendants and returns
// once the kernel reports the cgroup frozen. It writes the freeze once and
// polls the state every 100µs, re-writing it now and then: runc's loop
// (opencontainers/cgroups' FreezerGroup.Set) thaws and sleeps 10 ms every 50
// tries to let a racing `runc exec` through, and a pod allocating in memory
// reclaim then stays FREEZING for hundreds of milliseconds, growing all the
// while (in the e2e tier, past the OOM kill: docs/benchmarks-history.md). New children
// of a freezing task are frozen by the kernel as they are forked. A cgroup
// not frozen within freezeSettle is left freezing, with ErrStillFreezing.
func (c PodCgroup) Freeze() error {
	if err := c.check(); err != nil {
		return err
	}
	file, want, frozen := "freezer.state", string(cgroups.Frozen), func(s string) bool { return strings.TrimSpace(s) == "FROZEN" }
	if c.Version == V2 {
		file, want = "cgroup.freeze", "1"
		frozen = func(string) bool {
			ev, err := cgroups.ReadFile(c.Dir, "cgroup.events")
			return err == nil && strings.Contains(ev, "frozen 1")
		}
	}
	deadline := time.Now().Add(freezeSettle)
	for i := 0; ; i++ {
		if i%200 == 0 {
			if err := cgroups.WriteFile(c.Dir, file, want); err != nil {
				return fmt.Errorf("freezing %s: %w", c, err)
			}
		}
		state, err := cgroups.ReadFile(c.Dir, file)
		if err != nil {
			return fmt.Errorf("freezing %s: %w", c, err)
		}
		if frozen(state) {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("freezing %s: %w (state %q after %v)", c, ErrStillFreezing, strings.TrimSpace(state), freezeSettle)
		}
		time.Sleep(100 * time.Microsecond)
	}
}

// Thaw lets the cgroup's tasks run again.
func (c PodCgroup) Thaw() error {
	if err := c.check(); err != nil {
		return err
	}
	var err error
	if c.Version == V1 {
		err = (&cgroupsfs.FreezerGroup{}).Set(c.Dir, &cgroups.Resources{Freezer: cgroups.Thawed})
	} else {
		err = c.v2Manager().Freeze(cgroups.Thawed)
	}
	if err != nil {
		return fmt.Errorf("thawing %s: %w", c, err)
	}
	return nil
}

// Frozen reports whether the cgroup itself is frozen (not merely an
// ancestor of it).
func (c PodCgroup) Frozen() (bool, error) {
	if err := c.check(); err != nil {
		return false, err
	}
	var st cgroups.FreezerState
	var err error
	if c.Version == V1 {
		st, err = (&cgroupsfs.FreezerGroup{}).GetState(c.Dir)
	} else {
		st, err = c.v2Manager().GetFreezerState()
	}
	if err != nil {
		return false, fmt.Errorf("reading the freezer state of %s: %w", c, err)
	}
	return st == cgroups.Frozen, nil
}

func (c PodCgroup) v2Manager() *fs2.Manager {
	// fs2.NewManager only fails when it must derive the path from config.
	m, _ := fs2.NewManager(&cgroups.Cgroup{Resources: &cgroups.Resources{}}, c.Dir)
	return m
}

// Pids lists every process in the cgroup and its descendants. A descendant
// that vanishes while it is read (a container the runtime is removing: its
// cgroup.procs answers ENODEV, or is gone) has no processes left to list;
// cgroups.GetAllPids fails the whole walk on it, which made the brake report
// a kill as failed when the kubelet had stopped a braked pod's container a
// moment before (make bench-ramp, 2 of 25 runs at 1000-4000 MiB/s).
func (c PodCgroup) Pids() ([]int, error) {
	if _, err := os.Stat(c.Dir); err != nil {
		return nil, fmt.Errorf("listing the processes of %s: %w", c, err)
	}
	var pids []int
	err := filepath.WalkDir(c.Dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			if path != c.Dir && vanished(err) {
				return fs.SkipDir
			}
			return err
		}
		if !d.IsDir() {
			return nil
		}
		procs, err := cgroups.GetPids(path)
		if err != nil {
			if path != c.Dir && vanished(err) {
				return fs.SkipDir
			}
			return err
		}
		pids = append(pids, procs...)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("listing the processes of %s: %w", c, err)
	}
	return pids, nil
}

// vanished: a cgroup being removed answers reads with ENODEV, or is gone.
func vanished(err error) bool {
	return errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ENODEV)
}

// Kill ends every task in the cgroup and its descendants, frozen or not,
// and leaves the cgroup thawed: on v2 through cgroup.kill (Linux 5.14+; a
// frozen task dies of it), otherwise by SIGKILL to every process and, since a
// task frozen by the v1 freezer only acts on a signal once it runs, a thaw.
// Processes that appear meanwhile (a fork racing the freeze) are killed in
// further rounds. It returns how many processes were signalled (on v2 with
// cgroup.kill: how many there were) and waits, up to timeout, until no
// process is left. When the kill fails (kill(2) refused with EPERM for
// processes of other users without CAP_KILL) the cgroup is thawed all the
// same and the error returned: a failed kill never leaves the pod frozen.
// cgroup.kill signals from the kernel and needs no CAP_KILL.
func (c PodCgroup) Kill(timeout time.Duration) (int, error) {
	if err := c.check(); err != nil {
		return 0, err
	}
	pids, err := c.Pids()
	if err != nil {
		return 0, err
	}
	n := len(pids)
	killed := false
	if c.Version == V2 {
		err := cgroups.WriteFile(c.Dir, "cgroup.kill", "1")
		switch {
		case err == nil:
			killed = true
		case errors.Is(err, fs.ErrNotExist):
			// Older kernel: signal by hand below.
		default:
			return 0, c.thawAfterFailedKill(fmt.Errorf("writing cgroup.kill of %s: %w", c, err))
		}
	}
	if !killed {
		n = 0
		var killErr error
		for _, pid := range pids {
			if err := syscall.Kill(pid, syscall.SIGKILL); err == nil {
				n++
			} else if !errors.Is(err, syscall.ESRCH) && killErr == nil {
				// Signal the others still; report the first failure.
				killErr = fmt.Errorf("killing process %d of %s: %w%s", pid, c, err, killHint(err))
			}
		}
		if killErr != nil {
			return n, c.thawAfterFailedKill(killErr)
		}
	}
	if err := c.Thaw(); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return n, err
	}
	deadline := time.Now().Add(timeout)
	for {
		left, err := c.Pids()
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return n, nil // the runtime removed the cgroup already
			}
			return n, err
		}
		if len(left) == 0 {
			return n, nil
		}
		if time.Now().After(deadline) {
			return n, fmt.Errorf("%s: %d processes left %v after SIGKILL (%s)", c, len(left), timeout, pidList(left))
		}
		for _, pid := range left {
			_ = syscall.Kill(pid, syscall.SIGKILL) // late forks; ESRCH for the dying
		}
		time.Sleep(time.Millisecond)
	}
}

// thawAfterFailedKill thaws the cgroup after a kill that failed, so the pod
// is never left frozen: it then ends on the normal path (the kubelet's
// SIGTERM and SIGKILL, which a task frozen by the v1 freezer would not act
// on). It returns err, joined with the thaw's error if that failed too.
func (c PodCgroup) thawAfterFailedKill(err error) error {
	if terr := c.Thaw(); terr != nil && !errors.Is(terr, fs.ErrNotExist) {
		return errors.Join(err, terr)
	}
	return err
}

// killHint names the capability a refused kill(2) lacks: signalling
// processes of other users needs CAP_KILL (docs/security.md).
func killHint(err error) string {
	if errors.Is(err, syscall.EPERM) {
		return " (signalling processes of other users needs CAP_KILL)"
	}
	return ""
}

func pidList(pids []int) string {
	parts := make([]string, 0, min(len(pids), 10))
	for i, p := range pids {
		if i == 10 {
			parts = append(parts, "...")
			break
		}
		parts = append(parts, fmt.Sprint(p))
	}
	return strings.Join(parts, " ")
}
