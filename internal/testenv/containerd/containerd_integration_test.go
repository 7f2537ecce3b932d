//go:build integration

package containerd_test

import (
	"context"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/evictiond/evictiond/internal/testenv/containerd"
	"github.com/evictiond/evictiond/internal/testenv/images"
	"github.com/evictiond/evictiond/internal/testenv/proc"
)

// TestImportedImagesAreListedByTheCRI proves the private containerd starts, answers the CRI,
// and sees images built by the images package, under the reference and ID it reports.
func TestImportedImagesAreListedByTheCRI(t *testing.T) {
	ctrd := containerd.Start(t, containerd.Options{RootTmpfsBytes: 256 << 20})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	spec, err := images.Busybox("example.test/smoke:v1", "/bin/true")
	if err != nil {
		t.Fatal(err)
	}
	spec.Files = append(spec.Files, images.Padding("/pad", 1<<20, "smoke"))
	built, err := images.Import(ctx, ctrd.Socket, containerd.CRINamespace, spec)
	if err != nil {
		t.Fatal(err)
	}

	conn, err := grpc.NewClient(ctrd.Endpoint, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	list, err := runtimeapi.NewImageServiceClient(conn).ListImages(ctx, &runtimeapi.ListImagesRequest{})
	if err != nil {
		t.Fatalf("ListImages: %v", err)
	}
	for _, img := range list.Images {
		if img.Id == built.ID {
			if len(img.RepoTags) != 1 || img.RepoTags[0] != spec.Ref {
				t.Errorf("image %s tags = %v, want [%s]", img.Id, img.RepoTags, spec.Ref)
			}
			if img.Size < 1<<20 {
				t.Errorf("image size = %d, want at least the 1 MiB padding", img.Size)
			}
			return
		}
	}
	t.Fatalf("image %s (%s) not listed by the CRI; listed: %v", built.ID, spec.Ref, list.Images)
}

// TestPodSandboxRunsFromTheLocalSandboxImageAndStopLeavesNothing proves what the tiers rely on
// in containerd 2: the private instance is containerd 2.x from EVICTIOND_CONTAINERD_BIN; a pod
// sandbox and a container run from locally imported images with no registry (the pause image
// under the configured pinned_images.sandbox tag); the CRI reports that image pinned and no
// other; RuntimeConfig reports the cgroupfs driver (the kubelet takes the runtime's driver from
// it); ImageFsInfo names the overlayfs snapshotter under Root; and the stop, with the sandbox and
// its container still running, leaves no shim, mount, cgroup or file behind.
func TestPodSandboxRunsFromTheLocalSandboxImageAndStopLeavesNothing(t *testing.T) {
	var dir, socket, cgroupParent string
	t.Run("run", func(t *testing.T) {
		ctrd := containerd.Start(t, containerd.Options{RootTmpfsBytes: 256 << 20})
		dir, socket, cgroupParent = ctrd.Dir, ctrd.Socket, ctrd.CgroupParent
		if !strings.HasPrefix(ctrd.Version, "2.") {
			t.Fatalf("containerd version = %q, want 2.x", ctrd.Version)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		pause, err := ctrd.ImportSandboxImage(ctx)
		if err != nil {
			t.Fatal(err)
		}
		spec, err := images.Busybox("example.test/sleeper:v1", "/bin/sleep", "3600")
		if err != nil {
			t.Fatal(err)
		}
		sleeper, err := images.Import(ctx, ctrd.Socket, containerd.CRINamespace, spec)
		if err != nil {
			t.Fatal(err)
		}

		conn, err := grpc.NewClient(ctrd.Endpoint, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		rt := runtimeapi.NewRuntimeServiceClient(conn)
		is := runtimeapi.NewImageServiceClient(conn)

		list, err := is.ListImages(ctx, &runtimeapi.ListImagesRequest{})
		if err != nil {
			t.Fatal(err)
		}
		pinned := map[string]bool{}
		for _, img := range list.Images {
			pinned[img.Id] = img.Pinned
		}
		if want := map[string]bool{pause.ID: true, sleeper.ID: false}; !reflect.DeepEqual(pinned, want) {
			t.Errorf("images and their pinned flag = %v, want %v (sandbox image %s, sleeper %s)", pinned, want, pause.ID, sleeper.ID)
		}

		rc, err := rt.RuntimeConfig(ctx, &runtimeapi.RuntimeConfigRequest{})
		if err != nil {
			t.Fatalf("CRI RuntimeConfig: %v", err)
		}
		if got := rc.GetLinux().GetCgroupDriver(); got != runtimeapi.CgroupDriver_CGROUPFS {
			t.Errorf("RuntimeConfig cgroup driver = %v, want CGROUPFS", got)
		}

		// The snapshot sizes behind the usage are collected every stats_collect_period (10 s).
		var fs *runtimeapi.ImageFsInfoResponse
		for deadline := time.Now().Add(15 * time.Second); ; time.Sleep(200 * time.Millisecond) {
			fs, err = is.ImageFsInfo(ctx, &runtimeapi.ImageFsInfoRequest{})
			if err != nil {
				t.Fatalf("CRI ImageFsInfo: %v", err)
			}
			if len(fs.ImageFilesystems) == 0 {
				t.Fatalf("ImageFsInfo: no image filesystem: %v", fs)
			}
			if fs.ImageFilesystems[0].GetUsedBytes().GetValue() > 0 || time.Now().After(deadline) {
				break
			}
		}
		if got, want := fs.ImageFilesystems[0].GetFsId().GetMountpoint(), filepath.Join(ctrd.Root, "io.containerd.snapshotter.v1.overlayfs"); got != want {
			t.Errorf("ImageFsInfo image filesystem = %q, want %q", got, want)
		}
		if used := fs.ImageFilesystems[0].GetUsedBytes().GetValue(); used < 1<<20 {
			t.Errorf("ImageFsInfo image filesystem used bytes = %d after 15 s, want the two unpacked busybox images (over 1 MiB)", used)
		}
		if n := len(fs.ContainerFilesystems); n != 0 {
			t.Errorf("ImageFsInfo reports %d container filesystems, want none (writable layers live with the images)", n)
		}

		logDir := filepath.Join(ctrd.Dir, "pod-logs")
		if err := os.MkdirAll(logDir, 0o755); err != nil {
			t.Fatal(err)
		}
		sbCfg := &runtimeapi.PodSandboxConfig{
			Metadata:     &runtimeapi.PodSandboxMetadata{Name: "smoke", Uid: "uid-smoke", Namespace: "default"},
			LogDirectory: logDir,
			Linux: &runtimeapi.LinuxPodSandboxConfig{
				CgroupParent: ctrd.CgroupParent + "/uid-smoke",
				SecurityContext: &runtimeapi.LinuxSandboxSecurityContext{
					NamespaceOptions: &runtimeapi.NamespaceOption{Network: runtimeapi.NamespaceMode_NODE},
				},
			},
		}
		sb, err := rt.RunPodSandbox(ctx, &runtimeapi.RunPodSandboxRequest{Config: sbCfg})
		if err != nil {
			t.Fatalf("RunPodSandbox: %v\n--- containerd log ---\n%s", err, ctrd.LogTail(30))
		}
		ctr, err := rt.CreateContainer(ctx, &runtimeapi.CreateContainerRequest{
			PodSandboxId:  sb.PodSandboxId,
			SandboxConfig: sbCfg,
			Config: &runtimeapi.ContainerConfig{
				Metadata: &runtimeapi.ContainerMetadata{Name: "sleeper"},
				Image:    &runtimeapi.ImageSpec{Image: spec.Ref},
				LogPath:  "sleeper.log",
			},
		})
		if err != nil {
			t.Fatalf("CreateContainer: %v\n--- containerd log ---\n%s", err, ctrd.LogTail(30))
		}
		if _, err := rt.StartContainer(ctx, &runtimeapi.StartContainerRequest{ContainerId: ctr.ContainerId}); err != nil {
			t.Fatalf("StartContainer: %v\n--- containerd log ---\n%s", err, ctrd.LogTail(30))
		}
		st, err := rt.ContainerStatus(ctx, &runtimeapi.ContainerStatusRequest{ContainerId: ctr.ContainerId})
		if err != nil {
			t.Fatal(err)
		}
		if st.GetStatus().GetState() != runtimeapi.ContainerState_CONTAINER_RUNNING {
			t.Fatalf("container state = %v, want running", st.GetStatus().GetState())
		}
		if n := len(shimsOf(t, socket)); n == 0 {
			t.Fatalf("no shim process names socket %s while a sandbox runs", socket)
		}
		if n := len(mountsUnder(t, dir)); n == 0 {
			t.Fatalf("no mount under %s while a container runs", dir)
		}
		// The subtest ends with the sandbox and its container running: the cleanup stops them.
	})
	if dir == "" {
		t.FailNow() // containerd did not start
	}

	if shims := shimsOf(t, socket); len(shims) > 0 {
		t.Errorf("shim processes left after the stop: %v", shims)
	}
	if mounts := mountsUnder(t, dir); len(mounts) > 0 {
		t.Errorf("mounts left under %s after the stop: %v", dir, mounts)
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Errorf("%s left after the stop (stat: %v)", dir, err)
	}
	if left, _ := filepath.Glob(filepath.Join("/sys/fs/cgroup/*", cgroupParent)); len(left) > 0 {
		t.Errorf("cgroups left after the stop: %v", left)
	}
}

// shimsOf lists the command lines of shim processes started for the containerd on socket.
func shimsOf(t *testing.T, socket string) []string {
	t.Helper()
	var out []string
	entries, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if _, err := strconv.Atoi(e.Name()); err != nil {
			continue
		}
		cmdline, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil || !strings.HasPrefix(filepath.Base(strings.SplitN(string(cmdline), "\x00", 2)[0]), "containerd-shim") {
			continue
		}
		if strings.Contains(string(cmdline), socket) {
			out = append(out, strings.ReplaceAll(string(cmdline), "\x00", " "))
		}
	}
	return out
}

// mountsUnder lists the mount points at or below dir.
func mountsUnder(t *testing.T, dir string) []string {
	t.Helper()
	data, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, line := range strings.Split(string(data), "\n") {
		f := strings.Fields(line)
		if len(f) < 5 {
			continue
		}
		if mp := proc.UnescapeMountPath(f[4]); mp == dir || strings.HasPrefix(mp, dir+"/") {
			out = append(out, mp)
		}
	}
	return out
}
