// Package vm boots a real Linux kernel with cgroup v2 only, in qemu (TCG, no
// KVM needed), and runs programs in it: the cgroup v2 test tier
// (mk/cgroup2.mk) uses it to run static Go test binaries against a real v2
// kernel on machines whose own hierarchy is cgroup v1.
//
// The guest's root filesystem is an initramfs built here (cpio newc):
// busybox-static with one symlink per applet, an /init that mounts devtmpfs,
// proc, sysfs, cgroup2 (with +memory +pids +cpu delegated to children) and a
// tmpfs /tmp, then runs the caller's script. The script's output goes to a
// second serial port (a file on the host), separate from the kernel console,
// so kernel messages (an OOM kill report) never cut into test output. qemu's
// exit status does not carry the guest's: /init prints a marker line with the
// script's exit status before powering off.
//
// The kernel is Debian's stock amd64 kernel, unpacked (not installed) by
// hack/vm-kernel.sh; Kernel() finds it through $EVICTIOND_VM_KERNEL.
package vm

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/evictiond/evictiond/internal/testenv/proc"
)

// KernelEnv names the vmlinux to boot (hack/vm-kernel.sh prints it).
const KernelEnv = "EVICTIOND_VM_KERNEL"

// Cmdline is the kernel command line: cgroup v2 only, PSI on (Debian builds
// CONFIG_PSI_DEFAULT_DISABLED), the console on the first serial port, panic
// powers off at once (qemu runs with -no-reboot). Every v1 controller and
// named v1 hierarchy is disabled but the v1 freezer, which /init does not
// mount: a test may mount it to reach the brake's cgroup v1 kill path (a
// hybrid host's freezer) on the same kernel (test/cgroup2/caps). The v1
// freezer is not a v2 controller, so the unified hierarchy is the same.
const Cmdline = "console=ttyS0 panic=-1 quiet loglevel=4 " +
	"cgroup_no_v1=cpuset,cpu,cpuacct,blkio,memory,devices,net_cls,perf_event,net_prio,hugetlb,pids,rdma,misc,named " +
	"systemd.unified_cgroup_hierarchy=1 psi=1"

// exitMarker is printed on the output port with the script's exit status.
const exitMarker = "EVICTIOND-VM-EXIT"

// HostAddr is the host as the guest sees it with user networking (slirp):
// connections to it reach the host's loopback.
const HostAddr = "10.0.2.2"

// DiskMount is where Options.Disk mounts the guest's block filesystem.
const DiskMount = "/mnt/disk"

// Kernel returns the vmlinux named by $EVICTIOND_VM_KERNEL, or an error that
// says how to get one.
func Kernel() (string, error) {
	k := os.Getenv(KernelEnv)
	if k == "" {
		return "", fmt.Errorf("%s is not set: it names the kernel to boot; `make test-cgroup2` sets it (hack/vm-kernel.sh downloads Debian's kernel and prints its vmlinux)", KernelEnv)
	}
	if _, err := os.Stat(k); err != nil {
		return "", fmt.Errorf("%s=%s: %w (run hack/vm-kernel.sh)", KernelEnv, k, err)
	}
	return k, nil
}

// File is one file of the guest's root filesystem.
type File struct {
	// Source is a host file to copy; Data is used when Source is empty.
	Source string
	Data   []byte
	Mode   fs.FileMode // default 0755 for Source, 0644 for Data
	// Link, when set, makes the entry a symbolic link to Link (a systemd
	// unit's enablement, or masking it with /dev/null).
	Link string
}

// Options configure Run.
type Options struct {
	// Kernel is the vmlinux (or bzImage) to boot. Default: Kernel().
	Kernel string
	// Busybox is a static busybox. Default /bin/busybox (Debian's busybox-static).
	Busybox string
	// Files of the guest, by absolute guest path.
	Files map[string]File
	// Modules are kernel modules (.ko files on the host) loaded in this order
	// before Script runs, after those Network and Disk need.
	Modules []string
	// Script is the shell script (busybox ash) run once the guest is set up;
	// its exit status is the guest's result.
	Script string
	// Network gives the guest user-mode networking (eth0 10.0.2.15, the host
	// at HostAddr); loads e1000.ko from the kernel's modules.
	Network bool
	// Disk gives the guest a real block filesystem at DiskMount (ext2 on a
	// loop device over a sparse file in /tmp), so files written there have
	// real page cache (file, inactive_file), which tmpfs has not.
	Disk bool
	// MemoryMiB (default 2048) and CPUs (default 2).
	MemoryMiB int
	CPUs      int
	// Timeout bounds the whole run, boot to power-off. Default 5 minutes.
	Timeout time.Duration
	// Dir receives the initramfs, console.log and output.log. Required.
	Dir string
}

// Result of a run.
type Result struct {
	// Output is what the script wrote (stdout and stderr), "\r\n" turned into "\n".
	Output []byte
	// ExitStatus is the script's exit status.
	ExitStatus int
	// ConsolePath is the kernel console's log, OutputPath the raw output.
	ConsolePath, OutputPath string
	// Boot is qemu's start until the guest's /init ran, Total until qemu exited.
	Boot, Total time.Duration
}

// Run builds the initramfs, boots the VM and waits for it to power off. An
// error means the run produced no result (qemu failed, timeout, no exit
// marker); the console log's tail is part of it.
func Run(ctx context.Context, opts Options) (*Result, error) {
	if opts.Dir == "" {
		return nil, errors.New("vm: Options.Dir is required")
	}
	if opts.Kernel == "" {
		k, err := Kernel()
		if err != nil {
			return nil, err
		}
		opts.Kernel = k
	}
	if opts.Busybox == "" {
		opts.Busybox = "/bin/busybox"
	}
	if opts.MemoryMiB == 0 {
		opts.MemoryMiB = 2048
	}
	if opts.CPUs == 0 {
		opts.CPUs = 2
	}
	if opts.Timeout == 0 {
		opts.Timeout = 5 * time.Minute
	}
	mods, err := kernelModules(opts)
	if err != nil {
		return nil, err
	}
	opts.Modules = mods
	qemu, err := exec.LookPath("qemu-system-x86_64")
	if err != nil {
		return nil, fmt.Errorf("vm: qemu-system-x86_64 not found (install the Debian package qemu-system-x86, e.g. hack/install-deps.sh qemu-system-x86): %w", err)
	}
	initrd := filepath.Join(opts.Dir, "initramfs.cpio")
	if err := BuildInitramfs(initrd, opts); err != nil {
		return nil, err
	}
	res := &Result{ConsolePath: filepath.Join(opts.Dir, "console.log"), OutputPath: filepath.Join(opts.Dir, "output.log")}
	nic := "none"
	if opts.Network {
		nic = "user,model=e1000"
	}
	args := []string{
		"-accel", "tcg,thread=multi", "-cpu", "max",
		"-m", strconv.Itoa(opts.MemoryMiB), "-smp", strconv.Itoa(opts.CPUs),
		"-display", "none", "-monitor", "none", "-no-reboot",
		"-nic", nic,
		"-serial", "file:" + res.ConsolePath,
		"-serial", "file:" + res.OutputPath,
		"-kernel", opts.Kernel, "-initrd", initrd,
		"-append", Cmdline,
	}
	ctx, cancel := context.WithTimeout(ctx, opts.Timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, qemu, args...)
	var qemuOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &qemuOut, &qemuOut
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	start := time.Now()
	runErr := proc.StartCmd(cmd)
	if runErr == nil {
		runErr = cmd.Wait()
	}
	res.Total = time.Since(start)

	out, readErr := os.ReadFile(res.OutputPath)
	out = bytes.ReplaceAll(out, []byte("\r\n"), []byte("\n"))
	res.Output = out
	if ctx.Err() != nil {
		return res, fmt.Errorf("vm: no power-off within %v: %w%s", opts.Timeout, ctx.Err(), res.tails())
	}
	if runErr != nil {
		return res, fmt.Errorf("vm: qemu %v: %w: %s%s", args, runErr, strings.TrimSpace(qemuOut.String()), res.tails())
	}
	if readErr != nil {
		return res, fmt.Errorf("vm: reading the guest's output: %w", readErr)
	}
	status, boot, ok := parseMarkers(out)
	if !ok {
		return res, fmt.Errorf("vm: the guest powered off without its exit marker (a kernel panic, or /init died)%s", res.tails())
	}
	res.ExitStatus = status
	res.Boot = boot
	return res, nil
}

// kernelModules returns the modules Network and Disk need, from the modules
// tree hack/vm-kernel.sh unpacks beside vmlinux (<dir>/modules/<release>/kernel),
// followed by Options.Modules.
func kernelModules(opts Options) ([]string, error) {
	var want []string
	if opts.Network {
		want = append(want, "drivers/net/ethernet/intel/e1000/e1000.ko")
	}
	if opts.Disk {
		want = append(want, "drivers/block/loop.ko", "lib/crc16.ko", "fs/mbcache.ko", "fs/jbd2/jbd2.ko",
			"crypto/crc32c_generic.ko", "fs/ext4/ext4.ko")
	}
	if len(want) == 0 {
		return opts.Modules, nil
	}
	trees, _ := filepath.Glob(filepath.Join(filepath.Dir(opts.Kernel), "modules", "*", "kernel"))
	if len(trees) != 1 {
		return nil, fmt.Errorf("vm: want one kernel modules tree at %s/modules/<release>/kernel (hack/vm-kernel.sh unpacks it), found %v", filepath.Dir(opts.Kernel), trees)
	}
	var out []string
	for _, m := range want {
		p := filepath.Join(trees[0], m)
		if _, err := os.Stat(p); err != nil {
			return nil, fmt.Errorf("vm: kernel module %s: %w", m, err)
		}
		out = append(out, p)
	}
	return append(out, opts.Modules...), nil
}

var (
	exitLine = regexp.MustCompile(`(?m)^` + exitMarker + ` (\d+)$`)
	bootLine = regexp.MustCompile(`(?m)^EVICTIOND-VM-UP ([0-9.]+)$`)
)

// parseMarkers finds the exit status and the guest's uptime when /init ran.
func parseMarkers(out []byte) (status int, boot time.Duration, ok bool) {
	if m := bootLine.FindSubmatch(out); m != nil {
		if secs, err := strconv.ParseFloat(string(m[1]), 64); err == nil {
			boot = time.Duration(secs * float64(time.Second))
		}
	}
	m := exitLine.FindAllSubmatch(out, -1)
	if len(m) == 0 {
		return 0, boot, false
	}
	status, err := strconv.Atoi(string(m[len(m)-1][1]))
	return status, boot, err == nil
}

// tails returns the last lines of the console and the output, for errors.
func (r *Result) tails() string {
	console, _ := os.ReadFile(r.ConsolePath)
	return fmt.Sprintf("\n--- console (%s), last lines:\n%s\n--- output (%s), last lines:\n%s",
		r.ConsolePath, lastLines(console, 30), r.OutputPath, lastLines(r.Output, 30))
}

func lastLines(b []byte, n int) string {
	var lines []string
	sc := bufio.NewScanner(bytes.NewReader(bytes.ReplaceAll(b, []byte("\r"), nil)))
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		lines = append(lines, sc.Text())
		if len(lines) > n {
			lines = lines[1:]
		}
	}
	return strings.Join(lines, "\n")
}

// RequireCgroup2 fails t (never skips) unless it runs as root on a cgroup v2
// hierarchy at /sys/fs/cgroup whose root delegates the given controllers:
// what the guest's /init sets up, and what the v2 tests need.
func RequireCgroup2(t testing.TB, controllers ...string) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Fatal("the cgroup v2 tests create cgroups and must run as root (make test-cgroup2 runs them in a VM)")
	}
	ctl, err := os.ReadFile("/sys/fs/cgroup/cgroup.subtree_control")
	if err != nil {
		t.Fatalf("cgroup v2 is required at /sys/fs/cgroup (make test-cgroup2 boots a VM with it): %v", err)
	}
	have := strings.Fields(string(ctl))
	for _, c := range controllers {
		if !slices.Contains(have, c) {
			t.Fatalf("the %s controller is not enabled in /sys/fs/cgroup/cgroup.subtree_control (%q)", c, strings.TrimSpace(string(ctl)))
		}
	}
}
