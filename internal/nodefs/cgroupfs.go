// Package nodefs reads the node the way the kubelet (through cAdvisor) does, in
// one place for the monitor, the fast path (notify) and node-level reclaim:
// cgroupfs integers and "key value" files, the working set, statfs, the
// runtime's filesystems from the CRI, host paths under a mounted host root, and
// the filesystem layout. It holds no state but the open files of a Files, and
// imports nothing of evictiond's but policy's plain types.
package nodefs

import (
	"bytes"
	"fmt"
	"io/fs"
	"math"
	"strconv"
	"sync"

	"golang.org/x/sys/unix"
)

// UnlimitedMemory is the kubelet's isMemoryUnlimited cut-off: a memory limit at
// or above it means "no limit" (cgroup v1 reports 2^63 rounded down to a page;
// v2's "max" reads as math.MaxInt64).
const UnlimitedMemory = int64(1) << 62

// ReadInt64 reads a cgroupfs or procfs file holding one integer. "max" (cgroup
// v2's "no limit") and values beyond int64 (cgroup v1's 18446744073709551615
// for unlimited counters) read as math.MaxInt64.
func ReadInt64(path string) (int64, error) {
	return (*Files)(nil).ReadInt64(path)
}

func parseInt64(path string, raw []byte) (int64, error) {
	s := bytes.TrimSpace(raw)
	if string(s) == "max" {
		return math.MaxInt64, nil
	}
	v, err := strconv.ParseInt(string(s), 10, 64)
	if err != nil {
		if u, uerr := strconv.ParseUint(string(s), 10, 64); uerr == nil && u > math.MaxInt64 {
			return math.MaxInt64, nil
		}
		return 0, fmt.Errorf("reading %s: value %q is not an integer: %w", path, s, err)
	}
	return v, nil
}

// ReadStatKeys reads "key value" lines (memory.stat) and fills the values of
// the wanted keys; a wanted key that is absent is an error naming it.
func ReadStatKeys(path string, wanted map[string]*int64) error {
	return (*Files)(nil).ReadStatKeys(path, wanted)
}

// ReadStatKeysOptional is ReadStatKeys with optional keys too: an absent
// optional key is left at -1, not an error.
func ReadStatKeysOptional(path string, wanted, optional map[string]*int64) error {
	return (*Files)(nil).ReadStatKeysOptional(path, wanted, optional)
}

// onlyOptionalMissing: every key absent (-1) after a read is an optional one.
func onlyOptionalMissing(all, optional map[string]*int64) bool {
	for k, dst := range all {
		if _, opt := optional[k]; *dst < 0 && !opt {
			return false
		}
	}
	return true
}

func (f *Files) readStatKeys(path string, wanted map[string]*int64) error {
	buf := GetBuffer()
	defer PutBuffer(buf)
	raw, err := f.ReadSmallFile(path, *buf)
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

// WorkingSet is cAdvisor's (and so the kubelet's) working set of a memory
// cgroup: usage - inactive_file, clamped at zero.
func WorkingSet(usage, inactiveFile int64) int64 {
	if inactiveFile > usage {
		return 0
	}
	return usage - inactiveFile
}

// ReadSmallFile reads a cgroupfs or procfs file into buf (no fstat, no
// allocation); a file larger than buf is an error, not a truncated read. It
// calls open, read and close itself: os.Open registers every procfs and
// cgroupfs file with the runtime's poller (two epoll_ctl calls and an
// *os.File per read), a fifth of the fast poll's CPU at 10 reads a second.
func ReadSmallFile(path string, buf []byte) ([]byte, error) {
	fd, err := openForRead(path)
	if err != nil {
		return nil, err
	}
	defer unix.Close(fd)
	return readAll(fd, path, buf)
}

// readAll reads an open file to its end into buf.
func readAll(fd int, path string, buf []byte) ([]byte, error) {
	n := 0
	for {
		if n == len(buf) {
			return nil, fmt.Errorf("reading %s: larger than %d bytes", path, len(buf))
		}
		k, err := ignoringEINTR(func() (int, error) { return unix.Read(fd, buf[n:]) })
		if err != nil {
			return nil, fmt.Errorf("reading %s: %w", path, &fs.PathError{Op: "read", Path: path, Err: err})
		}
		if k == 0 {
			return buf[:n], nil
		}
		n += k
	}
}

func ignoringEINTR(call func() (int, error)) (int, error) {
	for {
		n, err := call()
		if err != unix.EINTR {
			return n, err
		}
	}
}

// BufferSize holds any memory.stat (cgroup v2's is about 1.5 KiB, v1's 1 KiB).
const BufferSize = 64 << 10

var buffers = sync.Pool{New: func() any { b := make([]byte, BufferSize); return &b }}

// GetBuffer lends a BufferSize buffer for ReadSmallFile; PutBuffer returns it.
func GetBuffer() *[]byte { return buffers.Get().(*[]byte) }

// PutBuffer returns a buffer from GetBuffer.
func PutBuffer(b *[]byte) { buffers.Put(b) }
