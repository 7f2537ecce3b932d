package vm

import (
	"fmt"
	"io"
	"io/fs"
	"path"
	"sort"
	"strings"
)

// cpioWriter writes a cpio archive in the "newc" format the kernel unpacks as
// an initramfs (Documentation/driver-api/early-userspace/buffer-format.rst):
// a 110-byte ASCII header per entry, the NUL-terminated name, the data, each
// padded to 4 bytes; the archive ends with the entry "TRAILER!!!".
type cpioWriter struct {
	w     io.Writer
	ino   uint32
	err   error
	dirs  map[string]bool
	total int64
}

func newCPIOWriter(w io.Writer) *cpioWriter {
	return &cpioWriter{w: w, ino: 1, dirs: map[string]bool{"": true, ".": true, "/": true}}
}

// Kinds of entries, the S_IF* bits of the header's mode.
const (
	cpioDir     = 0o040000
	cpioRegular = 0o100000
	cpioSymlink = 0o120000
	cpioCharDev = 0o020000
)

func (c *cpioWriter) write(b []byte) {
	if c.err != nil {
		return
	}
	n, err := c.w.Write(b)
	c.total += int64(n)
	c.err = err
}

func (c *cpioWriter) pad() {
	if rem := c.total % 4; rem != 0 {
		c.write(make([]byte, 4-rem))
	}
}

// entry writes one header, name and data, owned by root. name is relative ("bin/sh").
func (c *cpioWriter) entry(name string, mode uint32, devMajor, devMinor uint32, data []byte) {
	c.owned(name, mode, 0, 0, devMajor, devMinor, data)
}

// owned writes one header, name and data with an owner and group.
func (c *cpioWriter) owned(name string, mode uint32, uid, gid int, devMajor, devMinor uint32, data []byte) {
	c.ino++
	hdr := fmt.Sprintf("070701%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X",
		c.ino, mode, uid, gid, 1, 0, len(data), 0, 0, devMajor, devMinor, len(name)+1, 0)
	c.write([]byte(hdr))
	c.write(append([]byte(name), 0))
	c.pad()
	c.write(data)
	c.pad()
}

// mkdirAll writes the directories leading to (and including) dir once each.
func (c *cpioWriter) mkdirAll(dir string) {
	dir = strings.Trim(path.Clean(dir), "/")
	if c.dirs[dir] {
		return
	}
	c.mkdirAll(path.Dir(dir))
	c.dirs[dir] = true
	c.entry(dir, cpioDir|0o755, 0, 0, nil)
}

// File writes a regular file, creating its parent directories.
func (c *cpioWriter) File(name string, perm fs.FileMode, data []byte) {
	name = strings.Trim(path.Clean(name), "/")
	c.mkdirAll(path.Dir(name))
	c.entry(name, cpioRegular|uint32(perm.Perm()), 0, 0, data)
}

// Symlink writes name -> target.
func (c *cpioWriter) Symlink(name, target string) {
	name = strings.Trim(path.Clean(name), "/")
	c.mkdirAll(path.Dir(name))
	c.entry(name, cpioSymlink|0o777, 0, 0, []byte(target))
}

// CharDev writes a character device node (the console must exist before
// devtmpfs is mounted, or /init has no stdin/stdout).
func (c *cpioWriter) CharDev(name string, major, minor uint32) {
	name = strings.Trim(path.Clean(name), "/")
	c.mkdirAll(path.Dir(name))
	c.entry(name, cpioCharDev|0o600, major, minor, nil)
}

// Dir writes an empty directory.
func (c *cpioWriter) Dir(name string) { c.mkdirAll(name) }

// Close writes the trailer and returns the first error.
func (c *cpioWriter) Close() error {
	c.entry("TRAILER!!!", 0, 0, 0, nil)
	return c.err
}

// sortedKeys returns m's keys in order, for reproducible archives.
func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
