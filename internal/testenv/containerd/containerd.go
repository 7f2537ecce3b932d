// Package containerd starts a private, real containerd 2.x for integration tests: its own config
// (version 3), root, state and temp directories and socket under a temporary directory, the CRI
// plugins configured for this kind of machine, and a clean stop that leaves no mounts, shims or
// files behind.
//
// containerd, containerd-shim-runc-v2 and ctr come from EVICTIOND_CONTAINERD_BIN (hack/containerd.sh
// builds them from the Go module proxy; `make containerd-binaries`), never from PATH; runc is
// Debian's (`make cri-packages`). Tests that use it are integration tests and run as root.
package containerd

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/evictiond/evictiond/internal/testenv/ctrdbin"
	"github.com/evictiond/evictiond/internal/testenv/images"
	"github.com/evictiond/evictiond/internal/testenv/proc"
)

// DefaultSandboxImage is the pause image containerd 2.2 asks for (its default
// pinned_images.sandbox, set explicitly in the generated config); ImportSandboxImage imports a
// locally built image under this tag, so no pod start pulls from a registry.
const DefaultSandboxImage = images.PauseRef

// CRINamespace is the containerd namespace the CRI plugin keeps its images and containers in.
const CRINamespace = "k8s.io"

// MajorVersion is the containerd major version this package configures (config version 3);
// Start refuses any other.
const MajorVersion = 2

// Options shape the private containerd.
type Options struct {
	// RootTmpfsBytes, when above zero, mounts a tmpfs of this size as containerd's root, so
	// statfs on Root sees this containerd's images and containers and nothing else (byte
	// counts in GC tests are then exact, whatever else the machine writes).
	RootTmpfsBytes int64
	// SandboxImage is the CRI images plugin's pinned_images.sandbox. Default DefaultSandboxImage.
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
	// BinDir holds the containerd, shim and ctr binaries this instance runs (ctrdbin).
	BinDir string
	// Version is what `containerd --version` reports, e.g. "2.2.9".
	Version string
	// SandboxImage is the CRI's sandbox (pause) image reference.
	SandboxImage string
	// CgroupParent is a cgroup path private to this instance; tests put their pod sandboxes
	// under it (PodSandboxConfig.Linux.CgroupParent), and the cleanup removes it from every
	// cgroup hierarchy.
	CgroupParent string

	opts    Options
	runc    string
	cfgPath string
	cmd     *exec.Cmd
	exited  chan struct{}
	t       testing.TB
}

// Start starts a private containerd and waits until its CRI answers. It fails the test (with
// the tail of containerd's log) if containerd does not come up, and registers a cleanup that
// stops it and removes everything it created.
func Start(t testing.TB, opts Options) *Containerd {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Fatal("containerd test environment needs root (mounts, runc): run the integration tier as root (make test-cri)")
	}
	binDir, err := ctrdbin.Dir()
	if err != nil {
		t.Fatalf("containerd test environment: %v", err)
	}
	version, err := binaryVersion(filepath.Join(binDir, "containerd"))
	if err != nil {
		t.Fatalf("containerd test environment: %v", err)
	}
	runc, err := exec.LookPath("runc")
	if err != nil {
		t.Fatalf("runc not found in PATH: install Debian package \"runc\" (make cri-packages, or hack/install-deps.sh runc)")
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
		Dir:          dir,
		Root:         filepath.Join(dir, "root"),
		State:        filepath.Join(dir, "state"),
		Socket:       filepath.Join(dir, "containerd.sock"),
		LogPath:      filepath.Join(dir, "containerd.log"),
		CNIConfDir:   filepath.Join(dir, "cni-conf"),
		cfgPath:      filepath.Join(dir, "config.toml"),
		BinDir:       binDir,
		Version:      version,
		SandboxImage: opts.SandboxImage,
		runc:         runc,
		opts:         opts,
		t:            t,
		// The directory's random suffix keeps tests that run at the same time apart.
		CgroupParent: "/evictiond-" + filepath.Base(dir),
	}
	c.Endpoint = "unix://" + c.Socket
	t.Cleanup(c.cleanup)

	for _, d := range []string{c.Root, c.State, filepath.Join(dir, "opt"), filepath.Join(dir, "runc"), filepath.Join(dir, "tmp"), c.CNIConfDir} {
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

// versionPattern finds the release in `containerd --version`: "containerd
// github.com/containerd/containerd/v2 2.2.9 <revision>" (Debian's 1.6: "containerd
// github.com/containerd/containerd 1.6.20~ds1 1.6.20~ds1-1+deb12u3").
var versionPattern = regexp.MustCompile(`\sv?(\d+)\.(\d+)\.(\d+)\S*`)

// binaryVersion runs `containerd --version` and returns its release, refusing any but
// MajorVersion: the config below is containerd 2's (version 3).
func binaryVersion(path string) (string, error) {
	out, err := exec.Command(path, "--version").CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("%s --version: %w: %s", path, err, bytes.TrimSpace(out))
	}
	v, err := parseVersion(string(out))
	if err != nil {
		return "", fmt.Errorf("%s: %w: point %s at the output of hack/containerd.sh", path, err, ctrdbin.EnvVar)
	}
	return v, nil
}

// parseVersion returns the release in the output of `containerd --version` if its major
// version is MajorVersion.
func parseVersion(out string) (string, error) {
	m := versionPattern.FindStringSubmatch(out)
	if m == nil {
		return "", fmt.Errorf("no version in %q", strings.TrimSpace(out))
	}
	if major, _ := strconv.Atoi(m[1]); major != MajorVersion {
		return "", fmt.Errorf("containerd %s.%s.%s: the test environment configures containerd %d.x only (config version 3)",
			m[1], m[2], m[3], MajorVersion)
	}
	return strings.TrimPrefix(strings.TrimSpace(m[0]), "v"), nil
}

// config renders containerd 2's version 3 config (docs/cri/config.md and docs/PLUGINS.md of
// containerd 2.2). Every path points into Dir so this instance shares nothing with a system
// containerd or another test's; plugins that would listen or write elsewhere are disabled.
//
// What moved from 1.6's version 2 config: the CRI plugin io.containerd.grpc.v1.cri is split
// into io.containerd.cri.v1.images (snapshotter, pinned_images.sandbox, which replaces
// sandbox_image), io.containerd.cri.v1.runtime (runtimes, cni, restrict_oom_score_adj) and
// io.containerd.grpc.v1.cri (the streaming server only); cni.bin_dir became bin_dirs.
func (c *Containerd) config() string {
	return fmt.Sprintf(`version = 3
root = %[1]q
state = %[2]q
# containerd 2 mounts image layers under a temp directory while unpacking; keep it private.
temp = %[3]q
# No conf.d drop-ins of the machine's (containerd config default imports /etc/containerd/conf.d).
imports = []
# btrfs and zfs are not built (CGO_ENABLED=0) or unused; the blockfile, devmapper and erofs
# snapshotters are unused; NRI would listen on /var/run/nri/nri.sock, shared with the machine;
# tracing is not wanted. (The image verifier cannot be disabled: the transfer service and the
# CRI depend on it; its directory is private below.)
disabled_plugins = [
  "io.containerd.snapshotter.v1.btrfs",
  "io.containerd.snapshotter.v1.zfs",
  "io.containerd.snapshotter.v1.devmapper",
  "io.containerd.snapshotter.v1.blockfile",
  "io.containerd.snapshotter.v1.erofs",
  "io.containerd.differ.v1.erofs",
  "io.containerd.mount-handler.v1.erofs",
  "io.containerd.nri.v1.nri",
  "io.containerd.tracing.processor.v1.otlp",
  "io.containerd.internal.v1.tracing",
]

[grpc]
  address = %[4]q

[ttrpc]
  address = %[5]q

[debug]
  level = "info"

[plugins]
  [plugins.'io.containerd.internal.v1.opt']
    path = %[6]q

  [plugins.'io.containerd.image-verifier.v1.bindir']
    # Missing: no verifier (the default is /opt/containerd/image-verifier/bin).
    bin_dir = %[12]q

  [plugins.'io.containerd.cri.v1.images']
    snapshotter = "overlayfs"

    [plugins.'io.containerd.cri.v1.images'.pinned_images]
      # The sandbox image is reported pinned (CRI Image.pinned) once imported under this tag.
      sandbox = %[7]q

  [plugins.'io.containerd.cri.v1.runtime']
    # runc cannot set oom_score_adj -998 without CAP_SYS_RESOURCE, which this machine lacks.
    restrict_oom_score_adj = true
    # Network namespaces of pod sandboxes under state, not /var/run/netns.
    netns_mounts_under_state_dir = true
    # No CDI specs of the machine's (/etc/cdi, /var/run/cdi).
    enable_cdi = false

    [plugins.'io.containerd.cri.v1.runtime'.containerd]
      default_runtime_name = "runc"

      [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc]
        runtime_type = "io.containerd.runc.v2"
        # The shim built with this containerd, whatever else PATH holds (Debian's 1.6 shim).
        runtime_path = %[8]q

        [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc.options]
          BinaryName = %[9]q
          # runc's own state directory, private too (its default is shared under /run).
          Root = %[11]q
          # The cgroupfs driver, which the CRI RuntimeConfig call reports to the kubelet.
          SystemdCgroup = false

    [plugins.'io.containerd.cri.v1.runtime'.cni]
      bin_dirs = ["/usr/lib/cni"]
      conf_dir = %[10]q

  [plugins.'io.containerd.grpc.v1.cri']
    stream_server_address = "127.0.0.1"
    stream_server_port = "0"
`, c.Root, c.State, filepath.Join(c.Dir, "tmp"), c.Socket, c.Socket+".ttrpc", filepath.Join(c.Dir, "opt"),
		c.SandboxImage, filepath.Join(c.BinDir, "containerd-shim-runc-v2"), c.runc, c.CNIConfDir, filepath.Join(c.Dir, "runc"),
		filepath.Join(c.Dir, "image-verifier"))
}

func (c *Containerd) start(t testing.TB) {
	t.Helper()
	logFile, err := os.OpenFile(c.LogPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		t.Fatalf("opening containerd log: %v", err)
	}
	cmd := exec.Command(filepath.Join(c.BinDir, "containerd"), "--config", c.cfgPath)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	// The shim resolves runc and other helpers through PATH; this containerd's directory
	// comes first so nothing of another containerd installation is picked up.
	cmd.Env = append(os.Environ(), "PATH="+c.BinDir+string(os.PathListSeparator)+os.Getenv("PATH"))
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
	out, err := exec.CommandContext(ctx, filepath.Join(c.BinDir, "ctr"), full...).CombinedOutput()
	if err != nil {
		return out, fmt.Errorf("ctr %s: %w: %s", strings.Join(args, " "), err, bytes.TrimSpace(out))
	}
	return out, nil
}

// ImportSandboxImage imports a locally built pause image (images.Pause, busybox sleeping)
// under SandboxImage, so pod sandboxes start without a registry, and waits until the CRI
// reports it pinned: containerd 2 labels an image pinned when its reference is one of
// pinned_images, which it does from the image event of the import, asynchronously (1.6 reported
// no image pinned). The kubelet's and evictiond's image GC then keep it.
func (c *Containerd) ImportSandboxImage(ctx context.Context) (images.Built, error) {
	spec, err := images.Pause()
	if err != nil {
		return images.Built{}, err
	}
	spec.Ref = c.SandboxImage
	built, err := images.Import(ctx, c.Socket, CRINamespace, spec)
	if err != nil {
		return images.Built{}, err
	}
	conn, err := grpc.NewClient(c.Endpoint, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return images.Built{}, err
	}
	defer conn.Close()
	is := runtimeapi.NewImageServiceClient(conn)
	waitCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	for {
		st, err := is.ImageStatus(waitCtx, &runtimeapi.ImageStatusRequest{Image: &runtimeapi.ImageSpec{Image: built.ID}})
		switch {
		case err != nil && !errors.Is(waitCtx.Err(), context.DeadlineExceeded):
			return built, fmt.Errorf("CRI ImageStatus %s: %w", built.ID, err)
		case err == nil && st.GetImage().GetPinned():
			return built, nil
		}
		select {
		case <-waitCtx.Done():
			return built, fmt.Errorf("sandbox image %s (%s) not reported pinned by the CRI within 10s (image: %v): "+
				"containerd %s should pin its pinned_images.sandbox", c.SandboxImage, built.ID, st.GetImage(), c.Version)
		case <-time.After(50 * time.Millisecond):
		}
	}
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
