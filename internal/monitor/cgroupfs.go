package monitor

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math"
	"os"
	"path/filepath"

	"github.com/evictiond/evictiond/internal/nodefs"
)

// memcgUsage is what a memory cgroup's working set is computed from.
type memcgUsage struct {
	usage        int64
	inactiveFile int64
	// file is the page cache (v2 file, v1 total_cache): what reclaim before
	// evict can ask back; read in the same pass over memory.stat; -1 when
	// the file lacks the key.
	file int64
}

// workingSet is cAdvisor's (nodefs.WorkingSet).
func (u memcgUsage) workingSet() int64 { return nodefs.WorkingSet(u.usage, u.inactiveFile) }

// readMemcgUsage reads a non-root memory cgroup: v1 memory.usage_in_bytes and
// total_inactive_file, v2 memory.current and inactive_file.
func (l *cgroupLayout) readMemcgUsage(cgroupPath string) (memcgUsage, error) {
	dir := l.dir("memory", cgroupPath)
	var u memcgUsage
	var err error
	if l.version == CgroupV2 {
		if u.usage, err = l.files.ReadInt64(filepath.Join(dir, "memory.current")); err != nil {
			return u, err
		}
		err = l.files.ReadStatKeysOptional(filepath.Join(dir, "memory.stat"), map[string]*int64{"inactive_file": &u.inactiveFile}, map[string]*int64{"file": &u.file})
		return u, err
	}
	if u.usage, err = l.files.ReadInt64(filepath.Join(dir, "memory.usage_in_bytes")); err != nil {
		return u, err
	}
	err = l.files.ReadStatKeysOptional(filepath.Join(dir, "memory.stat"), map[string]*int64{"total_inactive_file": &u.inactiveFile}, map[string]*int64{"total_cache": &u.file})
	return u, err
}

// readRootMemcgUsage reads the root memory cgroup. On v2 the root has no
// memory.current, so usage is anon + file from its memory.stat, as
// opencontainers/cgroups (and so cAdvisor and the kubelet) emulate it.
func (l *cgroupLayout) readRootMemcgUsage() (memcgUsage, error) {
	if l.version == CgroupV1 {
		return l.readMemcgUsage("/")
	}
	var u memcgUsage
	var anon, file int64
	err := l.files.ReadStatKeys(filepath.Join(l.mountDir, "memory.stat"), map[string]*int64{
		"anon": &anon, "file": &file, "inactive_file": &u.inactiveFile,
	})
	u.usage = anon + file
	return u, err
}

// readMemoryLimit reads a cgroup's memory limit (v1 memory.limit_in_bytes, v2
// memory.max); math.MaxInt64 or anything >= 2^62 means unlimited.
func (l *cgroupLayout) readMemoryLimit(cgroupPath string) (int64, error) {
	name := "memory.limit_in_bytes"
	if l.version == CgroupV2 {
		name = "memory.max"
	}
	return l.files.ReadInt64(filepath.Join(l.dir("memory", cgroupPath), name))
}

// readSwapUsage is a cgroup's memory.swap.current (cgroup v2); nil on v1
// (the kubelet supports swap on v2 only) or where the kernel does not account
// swap (swapaccount=0): unmeasured, never "no swap".
func (l *cgroupLayout) readSwapUsage(cgroupPath string) *int64 {
	if l.version != CgroupV2 {
		return nil
	}
	v, err := l.files.ReadInt64(filepath.Join(l.dir("memory", cgroupPath), "memory.swap.current"))
	if err != nil {
		return nil
	}
	return &v
}

// processController is the v1 controller whose hierarchy is walked to count
// a cgroup's processes; on v2 there is one hierarchy.
func (l *cgroupLayout) processDir(cgroupPath string) string {
	if l.version == CgroupV1 {
		pids := l.dir("pids", cgroupPath)
		if _, err := os.Stat(pids); err == nil {
			return pids
		}
	}
	return l.dir("memory", cgroupPath)
}

// countProcesses counts the processes (thread-group leaders, as cgroup.procs
// lists them) in a cgroup and all its descendants: cAdvisor's ProcessCount,
// which the kubelet ranks PID pressure by.
func (l *cgroupLayout) countProcesses(cgroupPath string) (int64, error) {
	buf := nodefs.GetBuffer()
	defer nodefs.PutBuffer(buf)
	n, err := countProcessesIn(l.processDir(cgroupPath), true, *buf)
	if err != nil {
		return 0, fmt.Errorf("counting processes of cgroup %s: %w", cgroupPath, err)
	}
	return n, nil
}

// countTasks reads the cgroup's pids.current: every task, threads included,
// in the cgroup and its descendants (hierarchical in the pids controller on
// v1 and on v2) — what pid.available counts.
func (l *cgroupLayout) countTasks(cgroupPath string) (int64, error) {
	if l.version == CgroupV1 {
		return l.files.ReadInt64(filepath.Join(l.dir("pids", cgroupPath), "pids.current"))
	}
	return l.files.ReadInt64(filepath.Join(l.dir("memory", cgroupPath), "pids.current"))
}

// readPodsPIDsLeft reads a cgroup's pids.max - pids.current: how many more
// tasks the pids controller admits in it. limited is false when pids.max is
// "max" or the cgroup has no pids controller (nothing but pid_max bounds it).
func (l *cgroupLayout) readPodsPIDsLeft(cgroupPath string) (left int64, limited bool, err error) {
	dir := l.dir("pids", cgroupPath)
	limit, err := l.files.ReadInt64(filepath.Join(dir, "pids.max"))
	if errors.Is(err, fs.ErrNotExist) {
		return 0, false, nil
	}
	if err != nil {
		return 0, false, err
	}
	if limit == math.MaxInt64 { // "max"
		return 0, false, nil
	}
	current, err := l.files.ReadInt64(filepath.Join(dir, "pids.current"))
	if err != nil {
		return 0, false, err
	}
	return limit - current, true, nil
}

// countProcessesIn walks a cgroup directory by hand: filepath.WalkDir's lstat
// and sorting were half the cost of reading 100 pods.
func countProcessesIn(dir string, isRoot bool, buf []byte) (int64, error) {
	procs := filepath.Join(dir, "cgroup.procs")
	n, err := countLines(procs, buf)
	if err != nil {
		if !isRoot && errors.Is(err, fs.ErrNotExist) {
			return 0, nil // a child cgroup removed while walking
		}
		return 0, fmt.Errorf("reading %s: %w", procs, err)
	}
	f, err := os.Open(dir)
	if err != nil {
		if !isRoot && errors.Is(err, fs.ErrNotExist) {
			return 0, nil
		}
		return 0, err
	}
	entries, err := f.ReadDir(-1)
	f.Close()
	if err != nil {
		return 0, fmt.Errorf("listing %s: %w", dir, err)
	}
	for _, e := range entries {
		if !e.IsDir() {
			continue
		}
		c, err := countProcessesIn(filepath.Join(dir, e.Name()), false, buf)
		if err != nil {
			return 0, err
		}
		n += c
	}
	return n, nil
}

// countLines counts the lines of a file without holding all of it.
func countLines(path string, buf []byte) (int64, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	var n int64
	last := byte('\n')
	for {
		k, err := f.Read(buf)
		if k > 0 {
			n += int64(bytes.Count(buf[:k], []byte{'\n'}))
			last = buf[k-1]
		}
		if err == io.EOF {
			break
		}
		if err != nil {
			return 0, err
		}
	}
	if last != '\n' {
		n++
	}
	return n, nil
}
