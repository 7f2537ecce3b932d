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
	"strconv"
	"sync"
)

// unlimitedMemory is the kubelet's isMemoryUnlimited cut-off: a limit at or
// above it means "no limit" (cgroup v1 reports 2^63 rounded down to a page).
const unlimitedMemory = int64(1) << 62

// readInt64File reads a cgroupfs or procfs file holding one integer. "max"
// (cgroup v2's "no limit") reads as math.MaxInt64.
func readInt64File(path string) (int64, error) {
	buf := getBuffer()
	defer putBuffer(buf)
	raw, err := readSmallFile(path, *buf)
	if err != nil {
		return 0, err
	}
	s := bytes.TrimSpace(raw)
	if string(s) == "max" {
		return math.MaxInt64, nil
	}
	v, err := strconv.ParseInt(string(s), 10, 64)
	if err != nil {
		// cgroup v1 can report 18446744073709551615 for "unlimited" counters.
		if u, uerr := strconv.ParseUint(string(s), 10, 64); uerr == nil && u > math.MaxInt64 {
			return math.MaxInt64, nil
		}
		return 0, fmt.Errorf("reading %s: value %q is not an integer: %w", path, s, err)
	}
	return v, nil
}

// readStatKeys reads "key value" lines (memory.stat) and fills the values of
// the wanted keys; a wanted key that is absent is an error naming it.
func readStatKeys(path string, wanted map[string]*int64) error {
	buf := getBuffer()
	defer putBuffer(buf)
	raw, err := readSmallFile(path, *buf)
	if err != nil {
		return err
	}
	for _, dst := range wanted {
		*dst = -1 // memory.stat values are never negative: -1 marks "not seen"
	}
	found := 0
	for len(raw) > 0 && found < len(wanted) {
		line := raw
		if i := bytes.IndexByte(raw, '\n'); i >= 0 {
			line, raw = raw[:i], raw[i+1:]
		} else {
			raw = nil
		}
		sp := bytes.IndexByte(line, ' ')
		if sp <= 0 {
			continue
		}
		dst, ok := wanted[string(line[:sp])]
		if !ok {
			continue
		}
		v, err := strconv.ParseInt(string(bytes.TrimSpace(line[sp+1:])), 10, 64)
		if err != nil {
			return fmt.Errorf("reading %s: key %q: %w", path, line[:sp], err)
		}
		*dst = v
		found++
	}
	for k, dst := range wanted {
		if *dst < 0 {
			return fmt.Errorf("reading %s: key %q not present", path, k)
		}
	}
	return nil
}

// memcgUsage is what a memory cgroup's working set is computed from.
type memcgUsage struct {
	usage        int64
	inactiveFile int64
}

// workingSet is cAdvisor's: usage - inactive_file, clamped at zero.
func (u memcgUsage) workingSet() int64 {
	if u.inactiveFile > u.usage {
		return 0
	}
	return u.usage - u.inactiveFile
}

// readMemcgUsage reads a non-root memory cgroup: v1 memory.usage_in_bytes and
// total_inactive_file, v2 memory.current and inactive_file.
func (l *cgroupLayout) readMemcgUsage(cgroupPath string) (memcgUsage, error) {
	dir := l.dir("memory", cgroupPath)
	var u memcgUsage
	var err error
	if l.version == CgroupV2 {
		if u.usage, err = readInt64File(filepath.Join(dir, "memory.current")); err != nil {
			return u, err
		}
		err = readStatKeys(filepath.Join(dir, "memory.stat"), map[string]*int64{"inactive_file": &u.inactiveFile})
		return u, err
	}
	if u.usage, err = readInt64File(filepath.Join(dir, "memory.usage_in_bytes")); err != nil {
		return u, err
	}
	err = readStatKeys(filepath.Join(dir, "memory.stat"), map[string]*int64{"total_inactive_file": &u.inactiveFile})
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
	err := readStatKeys(filepath.Join(l.mountDir, "memory.stat"), map[string]*int64{
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
	return readInt64File(filepath.Join(l.dir("memory", cgroupPath), name))
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
	buf := getBuffer()
	defer putBuffer(buf)
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
		return readInt64File(filepath.Join(l.dir("pids", cgroupPath), "pids.current"))
	}
	return readInt64File(filepath.Join(l.dir("memory", cgroupPath), "pids.current"))
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

// readSmallFile reads a cgroupfs or procfs file into buf (no fstat, no
// allocation); a file larger than buf is an error, not a truncated read.
func readSmallFile(path string, buf []byte) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", path, err)
	}
	defer f.Close()
	n := 0
	for {
		if n == len(buf) {
			return nil, fmt.Errorf("reading %s: larger than %d bytes", path, len(buf))
		}
		k, err := f.Read(buf[n:])
		n += k
		if err == io.EOF {
			return buf[:n], nil
		}
		if err != nil {
			return nil, fmt.Errorf("reading %s: %w", path, err)
		}
		if k == 0 {
			return buf[:n], nil
		}
	}
}

// 64 KiB holds any memory.stat (cgroup v2's is about 1.5 KiB, v1's 1 KiB).
var buffers = sync.Pool{New: func() any { b := make([]byte, 64<<10); return &b }}

func getBuffer() *[]byte  { return buffers.Get().(*[]byte) }
func putBuffer(b *[]byte) { buffers.Put(b) }
