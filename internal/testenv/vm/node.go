package vm

import (
	"archive/tar"
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/evictiond/evictiond/internal/testenv/proc"
)

// A Node is a VM booted from a Debian root filesystem with systemd as PID 1,
// cgroup v2 only: the machine a real Kubernetes node runs on (the node tier,
// test/nodev2, adds containerd, the kubelet and their units as Files). The
// root filesystem is an initramfs (hack/node-v2-rootfs.sh's tar, converted
// to cpio here, with the run's Files over it), so no disk image has to be
// built; a sparse ext4 disk on virtio holds what needs a real filesystem
// (the kubelet's and containerd's directories). The test talks to the guest
// through a small HTTP probe (internal/testenv/vm/vmprobe), started by its
// own unit and reached through a port qemu forwards from this machine's
// loopback.
type Node struct {
	// Dir holds the initramfs, the disk image and the console log.
	Dir string
	// ConsolePath is the kernel's (and systemd's) serial console.
	ConsolePath string
	// Started is when qemu started; ProbeUp how long after it the probe answered.
	Started time.Time
	ProbeUp time.Duration

	probe  string // http://127.0.0.1:<port>
	cmd    *exec.Cmd
	exited chan struct{}
	err    error // qemu's exit, valid once exited is closed
}

// NodeOptions configure StartNode.
type NodeOptions struct {
	// Kernel is the vmlinux to boot. Default: Kernel().
	Kernel string
	// RootFS is the root filesystem as a tar (hack/node-v2-rootfs.sh).
	RootFS string
	// Files are added over the root filesystem, by absolute guest path.
	Files map[string]File
	// Probe is the static vmprobe binary (BuildProbe).
	Probe string
	// MemoryMiB (default 4096) and CPUs (default 2).
	MemoryMiB int
	CPUs      int
	// DiskBytes is the size of the ext4 disk the guest sees as /dev/vda (sparse
	// on this machine: it holds only what the guest writes). Default 8 GiB.
	DiskBytes int64
	// BootTimeout bounds the wait for the probe. Default 3 minutes.
	BootTimeout time.Duration
	// Dir receives the initramfs, the disk and the console log. Required.
	Dir string
}

// ProbePort is the port the guest's probe listens on.
const ProbePort = 9999

// NodeCmdline is the node's kernel command line: systemd from the
// initramfs, cgroup v2 only, PSI on.
const NodeCmdline = "console=ttyS0 rdinit=/sbin/init panic=-1 quiet loglevel=4 " +
	"systemd.unified_cgroup_hierarchy=1 cgroup_no_v1=all psi=1 systemd.show_status=false"

// StartNode builds the initramfs and the disk, boots the VM and waits until
// the probe answers. The VM runs until Stop.
func StartNode(ctx context.Context, opts NodeOptions) (*Node, error) {
	if opts.Dir == "" {
		return nil, errors.New("vm: NodeOptions.Dir is required")
	}
	if opts.Kernel == "" {
		k, err := Kernel()
		if err != nil {
			return nil, err
		}
		opts.Kernel = k
	}
	if opts.MemoryMiB == 0 {
		opts.MemoryMiB = 4096
	}
	if opts.CPUs == 0 {
		opts.CPUs = 2
	}
	if opts.DiskBytes == 0 {
		opts.DiskBytes = 8 << 30
	}
	if opts.BootTimeout == 0 {
		opts.BootTimeout = 3 * time.Minute
	}
	qemu, err := exec.LookPath("qemu-system-x86_64")
	if err != nil {
		return nil, fmt.Errorf("vm: qemu-system-x86_64 not found (install the Debian package qemu-system-x86): %w", err)
	}
	files := map[string]File{"/usr/local/bin/vmprobe": {Source: opts.Probe}, "/etc/systemd/system/vmprobe.service": {Data: []byte(probeUnit)},
		"/etc/systemd/system/multi-user.target.wants/vmprobe.service": {Link: "/etc/systemd/system/vmprobe.service"}}
	for k, v := range opts.Files {
		files[k] = v
	}
	initrd := filepath.Join(opts.Dir, "initramfs.cpio")
	if err := buildNodeInitramfs(initrd, opts.RootFS, files); err != nil {
		return nil, err
	}
	disk := filepath.Join(opts.Dir, "disk.img")
	if err := makeExt4(disk, opts.DiskBytes); err != nil {
		return nil, err
	}
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	n := &Node{Dir: opts.Dir, ConsolePath: filepath.Join(opts.Dir, "console.log"),
		probe: "http://127.0.0.1:" + strconv.Itoa(port), exited: make(chan struct{})}
	args := []string{
		"-accel", "tcg,thread=multi", "-cpu", "max",
		"-m", strconv.Itoa(opts.MemoryMiB), "-smp", strconv.Itoa(opts.CPUs),
		"-display", "none", "-monitor", "none", "-no-reboot",
		"-nic", fmt.Sprintf("user,model=e1000,hostfwd=tcp:127.0.0.1:%d-:%d", port, ProbePort),
		"-drive", "file=" + disk + ",format=raw,if=virtio,cache=unsafe",
		"-serial", "file:" + n.ConsolePath,
		"-kernel", opts.Kernel, "-initrd", initrd,
		"-append", NodeCmdline,
	}
	n.cmd = exec.Command(qemu, args...)
	var qemuOut bytes.Buffer
	n.cmd.Stdout, n.cmd.Stderr = &qemuOut, &qemuOut
	n.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	n.Started = time.Now()
	if err := proc.StartCmd(n.cmd); err != nil {
		return nil, fmt.Errorf("vm: starting qemu: %w", err)
	}
	go func() {
		n.err = n.cmd.Wait()
		if n.err != nil {
			n.err = fmt.Errorf("%w: %s", n.err, strings.TrimSpace(qemuOut.String()))
		}
		close(n.exited)
	}()
	bootCtx, cancel := context.WithTimeout(ctx, opts.BootTimeout)
	defer cancel()
	for {
		if _, err := n.Exec(bootCtx, "true"); err == nil {
			n.ProbeUp = time.Since(n.Started)
			return n, nil
		}
		select {
		case <-n.exited:
			return nil, fmt.Errorf("vm: qemu exited before the node's probe answered: %v\n%s", n.err, n.ConsoleTail(40))
		case <-bootCtx.Done():
			n.Kill()
			return nil, fmt.Errorf("vm: the node's probe did not answer within %v\n%s", opts.BootTimeout, n.ConsoleTail(40))
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// probeUnit starts the probe as early as the guest's network allows; it
// binds the wildcard address, so it needs no configured interface.
const probeUnit = `[Unit]
Description=evictiond test probe (runs commands for the host's test)
DefaultDependencies=no
After=sysinit.target
[Service]
ExecStart=/usr/local/bin/vmprobe -listen :9999
Restart=always
[Install]
WantedBy=multi-user.target
`

// ExecResult is what the probe reports of one command.
type ExecResult struct {
	Exit   int    `json:"exit"`
	Output string `json:"output"`
}

// ExecRequest is what the probe runs: Argv with Stdin, killed after Timeout seconds.
type ExecRequest struct {
	Argv    []string `json:"argv"`
	Stdin   string   `json:"stdin,omitempty"`
	Timeout float64  `json:"timeout,omitempty"`
}

// Exec runs argv in the guest and returns its combined output; a non-zero
// exit is an error that carries the output.
func (n *Node) Exec(ctx context.Context, argv ...string) (string, error) {
	r, err := n.Run(ctx, ExecRequest{Argv: argv})
	if err != nil {
		return "", err
	}
	if r.Exit != 0 {
		return r.Output, fmt.Errorf("guest: %s: exit %d: %s", strings.Join(argv, " "), r.Exit, strings.TrimSpace(r.Output))
	}
	return r.Output, nil
}

// Sh runs a shell script in the guest (sh -c) and returns its output.
func (n *Node) Sh(ctx context.Context, script string) (string, error) {
	return n.Exec(ctx, "sh", "-c", script)
}

// WriteFile writes data to a guest file (its directory must exist).
func (n *Node) WriteFile(ctx context.Context, guestPath string, data []byte) error {
	r, err := n.Run(ctx, ExecRequest{Argv: []string{"sh", "-c", `cat > "$0"`, guestPath}, Stdin: string(data)})
	if err == nil && r.Exit != 0 {
		err = fmt.Errorf("guest: writing %s: exit %d: %s", guestPath, r.Exit, r.Output)
	}
	return err
}

// Run sends one request to the probe.
func (n *Node) Run(ctx context.Context, req ExecRequest) (*ExecResult, error) {
	if req.Timeout == 0 {
		req.Timeout = 120
	}
	body, err := json.Marshal(req)
	if err != nil {
		return nil, err
	}
	hreq, err := http.NewRequestWithContext(ctx, http.MethodPost, n.probe+"/exec", bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(hreq)
	if err != nil {
		return nil, fmt.Errorf("vm probe: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		return nil, fmt.Errorf("vm probe: %s: %s", resp.Status, b)
	}
	var r ExecResult
	if err := json.NewDecoder(resp.Body).Decode(&r); err != nil {
		return nil, fmt.Errorf("vm probe: decoding the answer: %w", err)
	}
	return &r, nil
}

// Stop powers the guest off (forced: scopes whose PID 1 ignores SIGTERM
// would hold a clean poweroff for 90 s) and kills qemu if it has not exited
// within the timeout.
func (n *Node) Stop(timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, _ = n.Run(ctx, ExecRequest{Argv: []string{"systemctl", "--force", "--force", "poweroff"}, Timeout: 2})
	select {
	case <-n.exited:
		return nil
	case <-time.After(timeout):
		n.Kill()
		return fmt.Errorf("vm: the node did not power off within %v: killed", timeout)
	}
}

// Kill ends qemu at once.
func (n *Node) Kill() {
	if n.cmd.Process != nil {
		_ = n.cmd.Process.Kill()
	}
	<-n.exited
}

// ConsoleTail returns the console log's last lines.
func (n *Node) ConsoleTail(lines int) string {
	b, _ := os.ReadFile(n.ConsolePath)
	return "--- console (" + n.ConsolePath + "), last lines:\n" + lastLines(b, lines)
}

// BuildProbe builds the static vmprobe binary into dir, from the module at
// moduleRoot.
func BuildProbe(ctx context.Context, moduleRoot, dir string) (string, error) {
	out := filepath.Join(dir, "vmprobe")
	cmd := exec.CommandContext(ctx, "go", "build", "-trimpath", "-ldflags=-s -w", "-o", out, "./internal/testenv/vm/vmprobe")
	cmd.Dir = moduleRoot
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if b, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("vm: building vmprobe: %w\n%s", err, b)
	}
	return out, nil
}

// makeExt4 creates a sparse ext4 image (Debian's e2fsprogs).
func makeExt4(file string, size int64) error {
	f, err := os.Create(file)
	if err != nil {
		return fmt.Errorf("vm: creating the disk: %w", err)
	}
	if err := f.Truncate(size); err != nil {
		f.Close()
		return fmt.Errorf("vm: sizing the disk: %w", err)
	}
	if err := f.Close(); err != nil {
		return err
	}
	mkfs, err := exec.LookPath("mkfs.ext4")
	if err != nil {
		return fmt.Errorf("vm: mkfs.ext4 not found (install the Debian package e2fsprogs): %w", err)
	}
	if out, err := exec.Command(mkfs, "-q", "-F", "-m", "0", "-E", "lazy_itable_init=1,lazy_journal_init=1", file).CombinedOutput(); err != nil {
		return fmt.Errorf("vm: mkfs.ext4 %s: %w: %s", file, err, out)
	}
	return nil
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// buildNodeInitramfs converts the root filesystem's tar to cpio newc (owners,
// modes, links and device nodes kept) and appends files over it (later
// entries replace earlier ones when the kernel unpacks the archive).
func buildNodeInitramfs(dst, rootTar string, files map[string]File) error {
	links, err := hardlinkTargets(rootTar)
	if err != nil {
		return err
	}
	in, err := os.Open(rootTar)
	if err != nil {
		return fmt.Errorf("vm: the node's root filesystem (hack/node-v2-rootfs.sh builds it): %w", err)
	}
	defer in.Close()
	out, err := os.Create(dst)
	if err != nil {
		return fmt.Errorf("vm: creating the initramfs: %w", err)
	}
	defer out.Close()
	bw := bufio.NewWriterSize(out, 1<<20)
	c := newCPIOWriter(bw)
	kept := map[string][]byte{}
	tr := tar.NewReader(bufio.NewReaderSize(in, 1<<20))
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return fmt.Errorf("vm: reading %s: %w", rootTar, err)
		}
		name := strings.Trim(path.Clean(strings.TrimPrefix(h.Name, "./")), "/")
		if name == "" || name == "." {
			continue
		}
		perm := uint32(h.Mode) & 0o7777
		switch h.Typeflag {
		case tar.TypeDir:
			c.dirs[name] = true
			c.owned(name, cpioDir|perm, h.Uid, h.Gid, 0, 0, nil)
		case tar.TypeReg:
			data, err := io.ReadAll(tr)
			if err != nil {
				return fmt.Errorf("vm: reading %s from %s: %w", name, rootTar, err)
			}
			if links[name] {
				kept[name] = data
			}
			c.owned(name, cpioRegular|perm, h.Uid, h.Gid, 0, 0, data)
		case tar.TypeLink:
			target := strings.Trim(path.Clean(strings.TrimPrefix(h.Linkname, "./")), "/")
			data, ok := kept[target]
			if !ok {
				return fmt.Errorf("vm: %s in %s: hard link to %s, which comes later or is not a file", name, rootTar, target)
			}
			c.owned(name, cpioRegular|perm, h.Uid, h.Gid, 0, 0, data)
		case tar.TypeSymlink:
			c.owned(name, cpioSymlink|0o777, h.Uid, h.Gid, 0, 0, []byte(h.Linkname))
		case tar.TypeChar:
			c.owned(name, cpioCharDev|perm, h.Uid, h.Gid, uint32(h.Devmajor), uint32(h.Devminor), nil)
		case tar.TypeBlock:
			c.owned(name, 0o060000|perm, h.Uid, h.Gid, uint32(h.Devmajor), uint32(h.Devminor), nil)
		case tar.TypeFifo:
			c.owned(name, 0o010000|perm, h.Uid, h.Gid, 0, 0, nil)
		default:
			return fmt.Errorf("vm: %s in %s: tar entry type %q not supported", name, rootTar, h.Typeflag)
		}
	}
	if err := c.writeFiles(files); err != nil {
		return err
	}
	return finish(c, bw, out)
}

// hardlinkTargets lists the files of a tar that hard links point at.
func hardlinkTargets(rootTar string) (map[string]bool, error) {
	f, err := os.Open(rootTar)
	if err != nil {
		return nil, fmt.Errorf("vm: the node's root filesystem (hack/node-v2-rootfs.sh builds it): %w", err)
	}
	defer f.Close()
	targets := map[string]bool{}
	tr := tar.NewReader(bufio.NewReaderSize(f, 1<<20))
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return targets, nil
		}
		if err != nil {
			return nil, fmt.Errorf("vm: reading %s: %w", rootTar, err)
		}
		if h.Typeflag == tar.TypeLink {
			targets[strings.Trim(path.Clean(strings.TrimPrefix(h.Linkname, "./")), "/")] = true
		}
	}
}

// MemorySample is one reading of a cgroup's memory in the guest, at the
// guest's clock (vmprobe's /sample).
type MemorySample struct {
	At           int64 `json:"at"` // UnixNano, guest clock
	Current      int64 `json:"current"`
	Max          int64 `json:"max"` // -1: no limit
	InactiveFile int64 `json:"inactiveFile"`
}

// WorkingSet is the kubelet's working set: usage less inactive file pages.
func (s MemorySample) WorkingSet() int64 { return max(0, s.Current-s.InactiveFile) }

// StartSampling has the guest's probe read dir's memory every interval, until
// StopSampling.
func (n *Node) StartSampling(ctx context.Context, dir string, interval time.Duration) error {
	body, _ := json.Marshal(map[string]any{"dir": dir, "interval": interval.Seconds()})
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, n.probe+"/sample", bytes.NewReader(body))
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("vm probe: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		return fmt.Errorf("vm probe: starting the sampler: %s: %s", resp.Status, b)
	}
	return nil
}

// StopSampling stops the sampler and returns its readings.
func (n *Node) StopSampling(ctx context.Context) ([]MemorySample, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodDelete, n.probe+"/sample", nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, fmt.Errorf("vm probe: %w", err)
	}
	defer resp.Body.Close()
	var out []MemorySample
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		return nil, fmt.Errorf("vm probe: decoding the samples: %w", err)
	}
	return out, nil
}
