package vm

import (
	"bufio"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"strings"
)

// initScript is the guest's /init (busybox ash, PID 1). %s: module loading,
// network setup. The script's output and the markers go to ttyS1.
const initScript = `#!/bin/busybox sh
/bin/busybox --install -s /bin
export PATH=/bin HOME=/root TMPDIR=/tmp
mount -t devtmpfs dev /dev
mount -t proc proc /proc
mount -t sysfs sys /sys
out=/dev/ttyS1
stty -F $out raw -echo 2>/dev/null
echo "EVICTIOND-VM-UP $(cut -d' ' -f1 /proc/uptime)" > $out
fail() { echo "vm init: $*" > $out; echo "` + exitMarker + ` 125" > $out; poweroff -f; }
mount -t cgroup2 cgroup2 /sys/fs/cgroup || fail "mounting cgroup2"
mount -t tmpfs tmp /tmp || fail "mounting /tmp"
mkdir -p /root /var/tmp /run
echo "+memory +pids +cpu" > /sys/fs/cgroup/cgroup.subtree_control || fail "enabling memory, pids, cpu in the root's subtree_control"
%s
%s
cd /root
sh /script.sh > $out 2>&1 < /dev/null
echo "` + exitMarker + ` $?" > $out
poweroff -f
`

// BuildInitramfs writes the guest's root filesystem (uncompressed cpio newc:
// the kernel unpacks it faster than it would inflate gzip under emulation).
func BuildInitramfs(dst string, opts Options) error {
	busybox, err := os.ReadFile(opts.Busybox)
	if err != nil {
		return fmt.Errorf("vm: reading busybox (install the Debian package busybox-static): %w", err)
	}
	f, err := os.Create(dst)
	if err != nil {
		return fmt.Errorf("vm: creating the initramfs: %w", err)
	}
	defer f.Close()
	bw := bufio.NewWriterSize(f, 1<<20)
	c := newCPIOWriter(bw)
	for _, d := range []string{"dev", "proc", "sys", "tmp", "root", "lib/modules"} {
		c.Dir(d)
	}
	// Before devtmpfs is mounted, PID 1's stdio is /dev/console.
	c.CharDev("dev/console", 5, 1)
	c.CharDev("dev/null", 1, 3)
	c.File("bin/busybox", 0o755, busybox)
	c.Symlink("bin/sh", "busybox")

	var mods strings.Builder
	for _, m := range opts.Modules {
		data, err := os.ReadFile(m)
		if err != nil {
			return fmt.Errorf("vm: reading kernel module: %w", err)
		}
		guest := path.Join("lib/modules", filepath.Base(m))
		c.File(guest, 0o644, data)
		fmt.Fprintf(&mods, "insmod /%s || fail \"loading %s\"\n", guest, filepath.Base(m))
	}
	network := ""
	if opts.Network {
		// e1000 reports carrier about 2 s after the link is set up.
		network = `ip link set lo up && ip link set eth0 up && ip addr add 10.0.2.15/24 dev eth0 && ip route add default via ` + HostAddr + ` || fail "setting up eth0 (user networking)"
for i in $(seq 50); do grep -q 1 /sys/class/net/eth0/carrier && break; sleep 0.2; done
grep -q 1 /sys/class/net/eth0/carrier || fail "eth0 has no carrier after 10s"`
	}
	if opts.Disk {
		network += `
truncate -s 1G /tmp/disk.img && losetup /dev/loop0 /tmp/disk.img && mke2fs -q /dev/loop0 && mkdir -p ` + DiskMount + ` && mount -t ext4 /dev/loop0 ` + DiskMount + ` || fail "setting up the ext2 disk at ` + DiskMount + `"`
	}
	c.File("init", 0o755, fmt.Appendf(nil, initScript, mods.String(), network))
	c.File("script.sh", 0o755, []byte(opts.Script))
	if err := c.writeFiles(opts.Files); err != nil {
		return err
	}
	return finish(c, bw, f)
}

// writeFiles writes the guest's files (sorted, for reproducible archives).
func (c *cpioWriter) writeFiles(files map[string]File) error {
	for _, name := range sortedKeys(files) {
		file := files[name]
		if !path.IsAbs(name) {
			return fmt.Errorf("vm: guest file %q: must be an absolute path", name)
		}
		if file.Link != "" {
			c.Symlink(name, file.Link)
			continue
		}
		data, mode := file.Data, file.Mode
		if file.Source != "" {
			var err error
			if data, err = os.ReadFile(file.Source); err != nil {
				return fmt.Errorf("vm: guest file %s: %w", name, err)
			}
			if mode == 0 {
				mode = 0o755
			}
		}
		if mode == 0 {
			mode = 0o644
		}
		c.File(name, mode, data)
	}
	return nil
}

// finish writes the archive's trailer and closes the file.
func finish(c *cpioWriter, bw *bufio.Writer, f *os.File) error {
	if err := c.Close(); err != nil {
		return fmt.Errorf("vm: writing the initramfs: %w", err)
	}
	if err := bw.Flush(); err != nil {
		return fmt.Errorf("vm: writing the initramfs: %w", err)
	}
	return f.Close()
}
