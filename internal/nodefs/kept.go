package nodefs

import (
	"fmt"
	"io/fs"
	"maps"
	"slices"
	"sync"

	"golang.org/x/sys/unix"
)

// Files reads small procfs, sysfs and cgroupfs files like ReadSmallFile, and
// keeps open the ones its keep function names, reading them again at offset
// 0: the kernel makes such a file's text anew at every read from the start
// (seq_file, kernfs), so a kept file reads what a fresh open would. The fast
// poll and the pass read the same dozen node-level files every second or
// more often; their opens and closes (the path walk, the dentry, the file)
// were more of the idle agent's CPU than the reads themselves (a `perf`
// profile of the idle agent on the e2e node: openat 11 % of its CPU, read
// 7 %).
//
// Only files of procfs, sysfs and cgroupfs are kept (fstatfs at the open): a
// regular file may be replaced by a rename, which a kept descriptor would
// never see. A kept file that fails to read (a removed cgroup's file reads
// ENODEV) is closed and opened again by its path, once, in the same call:
// a cgroup removed and made again at the same path is read, not its ghost.
//
// A nil *Files keeps nothing. Files is safe for concurrent use.
type Files struct {
	keep func(path string) bool

	mu   sync.RWMutex
	open map[string]int
	// regular are the paths keep named that are not the kernel's (a test's
	// fixture): opened and closed at each read, not asked about again.
	regular map[string]bool
}

// NewFiles returns a Files that keeps the files keep names. keep is called
// only when a file is opened, not on the reads of a kept one.
func NewFiles(keep func(path string) bool) *Files {
	return &Files{keep: keep, open: map[string]int{}, regular: map[string]bool{}}
}

// ReadSmallFile is the package's ReadSmallFile through f.
func (f *Files) ReadSmallFile(path string, buf []byte) ([]byte, error) {
	if f == nil {
		return ReadSmallFile(path, buf)
	}
	f.mu.RLock()
	fd, ok := f.open[path]
	regular := f.regular[path]
	var raw []byte
	var err error
	if ok {
		raw, err = readAt0(fd, path, buf)
	}
	f.mu.RUnlock()
	if ok && err == nil {
		return raw, nil
	}
	if ok {
		f.forget(path, fd)
	}
	if regular || !f.keep(path) {
		return ReadSmallFile(path, buf)
	}
	fd, err = openForRead(path)
	if err != nil {
		return nil, err
	}
	raw, err = readAll(fd, path, buf)
	if err != nil {
		unix.Close(fd)
		return nil, err
	}
	if !kernelMade(fd) {
		unix.Close(fd)
		f.mu.Lock()
		f.regular[path] = true
		f.mu.Unlock()
		return raw, nil
	}
	f.mu.Lock()
	if old, dup := f.open[path]; dup {
		unix.Close(old) // a concurrent first read kept it too
	}
	f.open[path] = fd
	f.mu.Unlock()
	return raw, nil
}

// ReadInt64 is the package's ReadInt64 through f.
func (f *Files) ReadInt64(path string) (int64, error) {
	buf := GetBuffer()
	defer PutBuffer(buf)
	raw, err := f.ReadSmallFile(path, *buf)
	if err != nil {
		return 0, err
	}
	return parseInt64(path, raw)
}

// ReadStatKeys is the package's ReadStatKeys through f.
func (f *Files) ReadStatKeys(path string, wanted map[string]*int64) error {
	return f.ReadStatKeysOptional(path, wanted, nil)
}

// ReadStatKeysOptional is the package's ReadStatKeysOptional through f.
func (f *Files) ReadStatKeysOptional(path string, wanted, optional map[string]*int64) error {
	if len(optional) == 0 {
		return f.readStatKeys(path, wanted)
	}
	all := make(map[string]*int64, len(wanted)+len(optional))
	for k, v := range wanted {
		all[k] = v
	}
	for k, v := range optional {
		all[k] = v
	}
	if err := f.readStatKeys(path, all); err != nil && !onlyOptionalMissing(all, optional) {
		return err
	}
	return nil
}

// Kept names the files f holds open, sorted.
func (f *Files) Kept() []string {
	if f == nil {
		return nil
	}
	f.mu.RLock()
	defer f.mu.RUnlock()
	return slices.Sorted(maps.Keys(f.open))
}

// Close closes every kept file; f keeps files again on later reads.
func (f *Files) Close() {
	if f == nil {
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	for path, fd := range f.open {
		unix.Close(fd)
		delete(f.open, path)
	}
}

// forget closes a kept file that failed, unless another reader already
// replaced it.
func (f *Files) forget(path string, fd int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if cur, ok := f.open[path]; ok && cur == fd {
		unix.Close(fd)
		delete(f.open, path)
	}
}

func openForRead(path string) (int, error) {
	fd, err := ignoringEINTR(func() (int, error) { return unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC, 0) })
	if err != nil {
		return -1, fmt.Errorf("reading %s: %w", path, &fs.PathError{Op: "open", Path: path, Err: err})
	}
	return fd, nil
}

// readAt0 reads a kept file from offset 0 in one pread: the kernel makes the
// whole text of such a file in the read that starts at 0 (a seq_file fills
// the caller's buffer until its records end), so a short read is all of it.
// One call, not a loop: a second pread past the first would be served from a
// newer text if another reader had read from 0 meanwhile, and the two parts
// could disagree.
func readAt0(fd int, path string, buf []byte) ([]byte, error) {
	n, err := ignoringEINTR(func() (int, error) { return unix.Pread(fd, buf, 0) })
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", path, &fs.PathError{Op: "read", Path: path, Err: err})
	}
	if n == len(buf) {
		return nil, fmt.Errorf("reading %s: larger than %d bytes", path, len(buf))
	}
	return buf[:n], nil
}

// kernelMade: the file is on procfs, sysfs or cgroupfs (v1 or v2), whose
// files the kernel writes anew at every read from offset 0.
func kernelMade(fd int) bool {
	var st unix.Statfs_t
	if err := unix.Fstatfs(fd, &st); err != nil {
		return false
	}
	switch int64(st.Type) {
	case unix.PROC_SUPER_MAGIC, unix.SYSFS_MAGIC, unix.CGROUP_SUPER_MAGIC, unix.CGROUP2_SUPER_MAGIC:
		return true
	}
	return false
}
