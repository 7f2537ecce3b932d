// Package containerd starts a private, real containerd for integration tests: its own config,
// root and state directories and socket under a temporary directory, the CRI plugin configured
// for this kind of machine, and a clean stop that leaves no mounts, shims or files behind.
//
// It needs the Debian packages containerd and runc (`make cri-packages`, or
// `hack/install-deps.sh containerd runc`). Tests that use it are integration tests and run as root.
package containerd

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/evictiond/evictiond/internal/testenv/proc"
)

// DefaultSandboxImage is the pause image containerd 1.6 asks for; tests import an image under
// this tag (see the images package) before running pod sandboxes.
const DefaultSandboxImage = "registry.k8s.io/pause:3.6"

// CRINamespace is the containerd namespace the CRI plugin keeps its images and containers in.
const CRINamespace = "k8s.io"

// Options shape the private containerd.
type Options struct {
	// RootTmpfsBytes, when above zero, mounts a tmpfs of this size as containerd's root, so
	// statfs on Root sees this containerd's images and containers and nothing else (byte
	// counts in GC tests are then exact, whatever else the machine writes).
	RootTmpfsBytes int64
	// SandboxImage is the CRI plugin's sandbox_image. Default DefaultSandboxImage.
	SandboxImage string
	// StartTimeout bounds the wait for the CRI to answer. Default 30s.
	StartTimeout time.Duration
	// ParentDir is where the instance's directory is created. Default os.TempDir(). A
	// cluster harness passes its own root so everything it starts lives under one tree.
	ParentDir string
}

// Containerd is a running private containerd.
type Containerd struct {
	// Dir holds everything: config, root, state, socket, log.
	Dir string
	// Root is containerd's root directory (content, snapshots, CRI data).
	Root string
	// State is containerd's state directory (runtime state, shim sockets, sandbox files).
	State string
	// Socket is the path of containerd's gRPC socket.
	Socket string
	// Endpoint is the CRI endpoint for Socket, "unix://" + Socket.
	Endpoint string
	// LogPath is containerd's combined stdout and stderr.
	LogPath string
	// CNIConfDir is the CRI plugin's CNI configuration directory (plugins come from
	// /usr/lib/cni, Debian's containernetworking-plugins). It starts empty; the CRI picks up
	// a conflist written here later without a restart.
	CNIConfDir string
	// CgroupParent is a cgroup path private to this instance; tests put their pod sandboxes
	// under it (PodSandboxConfig.Linux.CgroupParent), and the cleanup removes it from every
	// cgroup hierarchy.
	CgroupParent string

	opts    Options
	cfgPath string
	cmd     *exec.Cmd
	exited  chan struct{}
	t       testing.TB
}

// requiredBinaries are looked up before anything starts, so a missing package is named plainly.
var requiredBinaries = map[string]string{
	"containerd":              "containerd",
	"containerd-shim-runc-v2": "containerd",
	"ctr":                     "containerd",
	"runc":                    "runc",
}

// Start starts a private containerd and waits until its CRI answers. It fails the test (with
// the tail of containerd's log) if containerd does not come up, and registers a cleanup that
// stops it and removes everything it created.
func Start(t testing.TB, opts Options) *Containerd {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Fatal("containerd test environment needs root (mounts, runc): run the integration tier as root (make test-cri)")
	}
	for bin, pkg := range requiredBinaries {
		if _, err := exec.LookPath(bin); err != nil {
			t.Fatalf("%s not found in PATH: install Debian package %q (make cri-packages, or hack/install-deps.sh %s)", bin, pkg, pkg)
		}
	}
	if opts.SandboxImage == "" {
		opts.SandboxImage = DefaultSandboxImage
	}
	if opts.StartTimeout == 0 {
		opts.StartTimeout = 30 * time.Second
	}
	// A short directory name: the socket path must stay under the 108-byte sun_path limit,
	// which t.TempDir() paths (they contain the test name) can exceed.
	dir, err := os.MkdirTemp(opts.ParentDir, "ctrd-")
	if err != nil {
		t.Fatalf("creating containerd test directory: %v", err)
	}
	c := &Containerd{
		Dir:        dir,
		Root:       filepath.Join(dir, "root"),
		State:      filepath.Join(dir, "state"),
		Socket:     filepath.Join(dir, "containerd.sock"),
		LogPath:    filepath.Join(dir, "containerd.log"),
		CNIConfDir: filepath.Join(dir, "cni-conf"),
		cfgPath:    filepath.Join(dir, "config.toml"),
		opts:       opts,
		t:          t,
		// The directory's random suffix keeps tests that run at the same time apart.
		CgroupParent: "/evictiond-" + filepath.Base(dir),
	}
	c.Endpoint = "unix://" + c.Socket
	t.Cleanup(c.cleanup)

	for _, d := range []string{c.Root, c.State, filepath.Join(dir, "opt"), filepath.Join(dir, "runc"), c.CNIConfDir} {
		if err := os.MkdirAll(d, 0o711); err != nil {
			t.Fatalf("creating %s: %v", d, err)
		}
	}
	if opts.RootTmpfsBytes > 0 {
		if err := unix.Mount("tmpfs", c.Root, "tmpfs", 0, "size="+strconv.FormatInt(opts.RootTmpfsBytes, 10)); err != nil {
			t.Fatalf("mounting a %d-byte tmpfs on %s: %v", opts.RootTmpfsBytes, c.Root, err)
		}
	}
	if err := os.WriteFile(c.cfgPath, []byte(c.config()), 0o644); err != nil {
		t.Fatalf("writing containerd config: %v", err)
	}
	c.start(t)
	return c
}

// config renders containerd 1.6's version 2 config. Every path points into Dir so this
// instance shares nothing with a system containerd or another test's.
func (c *Containerd) config() string {
	return fmt.Sprintf(`version = 2
root = %q
state = %q
disabled_plugins = ["io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.devmapper", "io.containerd.snapshotter.v1.zfs", "io.containerd.tracing.processor.v1.otlp", "io.containerd.internal.v1.tracing"]

[grpc]
  address = %q

[ttrpc]
  address = %q

[debug]
  level = "info"

[plugins."io.containerd.internal.v1.opt"]
  path = %q

[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = %q
  # runc cannot set oom_score_adj -998 without CAP_SYS_RESOURCE, which this machine lacks.
  restrict_oom_score_adj = true
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"

  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = %q

  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"

    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"

      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        # runc's own state directory, private too (its default is shared under /run).
        Root = %q
        SystemdCgroup = false
`, c.Root, c.State, c.Socket, c.Socket+".ttrpc", filepath.Join(c.Dir, "opt"),
		c.opts.SandboxImage, c.CNIConfDir, filepath.Join(c.Dir, "runc"))
}

func (c *Containerd) start(t testing.TB) {
	t.Helper()
	logFile, err := os.OpenFile(c.LogPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		t.Fatalf("opening containerd log: %v", err)
	}
	cmd := exec.Command("containerd", "--config", c.cfgPath)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	// Own process group: a Ctrl-C on the test does not hit containerd before the cleanup runs.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		logFile.Close()
		t.Fatalf("starting containerd: %v", err)
	}
	c.cmd = cmd
	c.exited = make(chan struct{})
	go func() {
		_ = cmd.Wait()
		logFile.Close()
		close(c.exited)
	}()

	ctx, cancel := context.WithTimeout(context.Background(), c.opts.StartTimeout)
	defer cancel()
	if err := c.waitForCRI(ctx); err != nil {
		t.Fatalf("containerd did not come up: %v\n--- tail of %s ---\n%s", err, c.LogPath, c.LogTail(40))
	}
}

// waitForCRI polls the CRI until the runtime reports RuntimeReady and the image service answers.
func (c *Containerd) waitForCRI(ctx context.Context) error {
	var lastErr error
	for {
		select {
		case <-c.exited:
			return fmt.Errorf("containerd exited early (%v)", c.cmd.ProcessState)
		default:
		}
		lastErr = c.probeCRI(ctx)
		if lastErr == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for the CRI on %s: %w (last error: %v)", c.Socket, ctx.Err(), lastErr)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func (c *Containerd) probeCRI(ctx context.Context) error {
	if _, err := os.Stat(c.Socket); err != nil {
		return err
	}
	conn, err := grpc.NewClient(c.Endpoint, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return err
	}
	defer conn.Close()
	callCtx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	status, err := runtimeapi.NewRuntimeServiceClient(conn).Status(callCtx, &runtimeapi.StatusRequest{})
	if err != nil {
		return fmt.Errorf("CRI Status: %w", err)
	}
	for _, cond := range status.GetStatus().GetConditions() {
		if cond.Type == runtimeapi.RuntimeReady && !cond.Status {
			return fmt.Errorf("runtime not ready: %s %s", cond.Reason, cond.Message)
		}
	}
	if _, err := runtimeapi.NewImageServiceClient(conn).ImageFsInfo(callCtx, &runtimeapi.ImageFsInfoRequest{}); err != nil {
		return fmt.Errorf("CRI ImageFsInfo: %w", err)
	}
	return nil
}

// Ctr runs `ctr` against this containerd in the CRI namespace and returns its combined output.
func (c *Containerd) Ctr(ctx context.Context, args ...string) ([]byte, error) {
	full := append([]string{"--address", c.Socket, "--namespace", CRINamespace}, args...)
	out, err := exec.CommandContext(ctx, "ctr", full...).CombinedOutput()
	if err != nil {
		return out, fmt.Errorf("ctr %s: %w: %s", strings.Join(args, " "), err, bytes.TrimSpace(out))
	}
	return out, nil
}

// Kill stops the containerd process (SIGTERM, then SIGKILL after 10s) and leaves its
// directories, shims and containers as they are: tests use it to make the socket vanish under
// a client, then Restart. Safe to call when already stopped.
func (c *Containerd) Kill() {
	if c.cmd == nil {
		return
	}
	select {
	case <-c.exited:
	default:
		_ = c.cmd.Process.Signal(syscall.SIGCONT) // a frozen containerd cannot handle SIGTERM
		_ = c.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-c.exited:
		case <-time.After(10 * time.Second):
			_ = c.cmd.Process.Kill()
			<-c.exited
		}
	}
	c.cmd = nil
}

// Freeze stops the containerd process with SIGSTOP: its socket stays but nothing answers, the
// way a runtime stuck on a loaded disk behaves. Thaw resumes it.
func (c *Containerd) Freeze() error {
	if c.cmd == nil {
		return fmt.Errorf("containerd is not running")
	}
	return c.cmd.Process.Signal(syscall.SIGSTOP)
}

// Thaw resumes a frozen containerd with SIGCONT.
func (c *Containerd) Thaw() error {
	if c.cmd == nil {
		return fmt.Errorf("containerd is not running")
	}
	return c.cmd.Process.Signal(syscall.SIGCONT)
}

// Restart starts containerd again on the same config, root and socket after Kill.
func (c *Containerd) Restart(t testing.TB) {
	t.Helper()
	c.Kill()
	c.start(t)
}

// LogTail returns the last n lines of containerd's log.
func (c *Containerd) LogTail(n int) string {
	data, err := os.ReadFile(c.LogPath)
	if err != nil {
		return fmt.Sprintf("(cannot read %s: %v)", c.LogPath, err)
	}
	lines := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// cleanup removes every pod sandbox through the CRI (which stops their shims), stops
// containerd, ends shims it left behind, unmounts everything under Dir and removes Dir.
func (c *Containerd) cleanup() {
	if c.cmd != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		if err := c.removeAllSandboxes(ctx); err != nil {
			c.t.Logf("containerd cleanup: removing pod sandboxes: %v", err)
		}
		cancel()
	}
	c.Kill()
	c.killOwnShims()
	c.removeCgroups()
	if err := proc.UnmountUnder(c.Dir); err != nil {
		c.t.Logf("containerd cleanup: %v", err)
	}
	if err := os.RemoveAll(c.Dir); err != nil {
		c.t.Logf("containerd cleanup: removing %s: %v", c.Dir, err)
	}
}

func (c *Containerd) removeAllSandboxes(ctx context.Context) error {
	conn, err := grpc.NewClient(c.Endpoint, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return err
	}
	defer conn.Close()
	rt := runtimeapi.NewRuntimeServiceClient(conn)
	list, err := rt.ListPodSandbox(ctx, &runtimeapi.ListPodSandboxRequest{})
	if err != nil {
		return err
	}
	for _, sb := range list.Items {
		if _, err := rt.StopPodSandbox(ctx, &runtimeapi.StopPodSandboxRequest{PodSandboxId: sb.Id}); err != nil {
			c.t.Logf("containerd cleanup: stopping sandbox %s: %v", sb.Id, err)
		}
		if _, err := rt.RemovePodSandbox(ctx, &runtimeapi.RemovePodSandboxRequest{PodSandboxId: sb.Id}); err != nil {
			c.t.Logf("containerd cleanup: removing sandbox %s: %v", sb.Id, err)
		}
	}
	return nil
}

// killOwnShims ends shim processes started for this containerd (their command line names
// this instance's socket), in case a sandbox could not be removed through the CRI.
func (c *Containerd) killOwnShims() {
	procs, err := os.ReadDir("/proc")
	if err != nil {
		return
	}
	for _, p := range procs {
		pid, err := strconv.Atoi(p.Name())
		if err != nil {
			continue
		}
		cmdline, err := os.ReadFile(filepath.Join("/proc", p.Name(), "cmdline"))
		if err != nil {
			continue
		}
		args := strings.Split(string(cmdline), "\x00")
		if len(args) == 0 || !strings.HasPrefix(filepath.Base(args[0]), "containerd-shim") {
			continue
		}
		if bytes.Contains(cmdline, []byte(c.Socket)) {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	}
}

// removeCgroups removes CgroupParent, deepest directories first, from every hierarchy mounted
// under /sys/fs/cgroup (cgroup v1 controllers and the unified v2 tree). Only empty cgroups can
// be removed, which they are once every sandbox is gone.
func (c *Containerd) removeCgroups() {
	roots, _ := filepath.Glob("/sys/fs/cgroup/*")
	roots = append(roots, "/sys/fs/cgroup")
	for _, root := range roots {
		top := filepath.Join(root, c.CgroupParent)
		var dirs []string
		_ = filepath.WalkDir(top, func(path string, d os.DirEntry, err error) error {
			if err == nil && d.IsDir() {
				dirs = append(dirs, path)
			}
			return nil
		})
		for i := len(dirs) - 1; i >= 0; i-- {
			if err := unix.Rmdir(dirs[i]); err != nil && !os.IsNotExist(err) {
				c.t.Logf("containerd cleanup: removing cgroup %s: %v", dirs[i], err)
			}
		}
	}
}
