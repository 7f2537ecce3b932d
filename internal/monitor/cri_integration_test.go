//go:build integration

package monitor

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/evictiond/evictiond/internal/policy"
	"github.com/evictiond/evictiond/internal/testenv/containerd"
	"github.com/evictiond/evictiond/internal/testenv/images"
)

// TestRealContainerdPodUsage runs a pod the way the kubelet does, on a private
// real containerd whose root is a 512 MiB tmpfs, with its cgroup parent in a
// kubepods tree on this machine's cgroup v1 hierarchy. The monitor must find
// the imagefs through the CRI (a dedicated filesystem, here), the pod's
// processes and working set in cgroupfs, the container's name through the
// CRI, its writable layer and its log.
func TestRealContainerdPodUsage(t *testing.T) {
	requireCgroupV1(t)
	tree := newTestCgroupTree(t, "cri")
	const rootBytes = 512 << 20
	ctrd := containerd.Start(t, containerd.Options{RootTmpfsBytes: rootBytes})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	if _, err := ctrd.ImportSandboxImage(ctx); err != nil {
		t.Fatal(err)
	}
	busybox, err := images.Busybox("evictiond.test/busybox:1")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := images.Import(ctx, ctrd.Socket, containerd.CRINamespace, busybox); err != nil {
		t.Fatal(err)
	}
	conn, err := grpc.NewClient(ctrd.Endpoint, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	runtime := runtimeapi.NewRuntimeServiceClient(conn)

	uid := types.UID("f00dcafe-0000-4000-8000-000000000042")
	podLogs := t.TempDir()
	sandboxCfg := &runtimeapi.PodSandboxConfig{
		Metadata:     &runtimeapi.PodSandboxMetadata{Name: "web", Namespace: "shop", Uid: string(uid)},
		LogDirectory: filepath.Join(podLogs, "shop_web_"+string(uid)),
		Labels:       map[string]string{podUIDLabel: string(uid)},
		Linux: &runtimeapi.LinuxPodSandboxConfig{
			CgroupParent: tree.root + "/kubepods/burstable/pod" + string(uid),
			SecurityContext: &runtimeapi.LinuxSandboxSecurityContext{
				NamespaceOptions: &runtimeapi.NamespaceOption{Network: runtimeapi.NamespaceMode_NODE},
			},
		},
	}
	if err := os.MkdirAll(sandboxCfg.LogDirectory, 0o755); err != nil {
		t.Fatal(err)
	}
	sb, err := runtime.RunPodSandbox(ctx, &runtimeapi.RunPodSandboxRequest{Config: sandboxCfg})
	if err != nil {
		t.Fatalf("RunPodSandbox: %v\n%s", err, ctrd.LogTail(30))
	}
	// 20 MiB into the writable layer, a line of log, then two processes that wait.
	script := images.BusyboxPath + " dd if=/dev/zero of=/data.bin bs=1048576 count=20 2>/dev/null; echo written; sleep 3600 & wait"
	ctr, err := runtime.CreateContainer(ctx, &runtimeapi.CreateContainerRequest{
		PodSandboxId: sb.PodSandboxId,
		Config: &runtimeapi.ContainerConfig{
			Metadata: &runtimeapi.ContainerMetadata{Name: "app"},
			Image:    &runtimeapi.ImageSpec{Image: busybox.Ref},
			Command:  []string{"/bin/sh", "-c", script},
			LogPath:  "app/0.log",
			Labels:   map[string]string{podUIDLabel: string(uid), "io.kubernetes.container.name": "app"},
		},
		SandboxConfig: sandboxCfg,
	})
	if err != nil {
		t.Fatalf("CreateContainer: %v\n%s", err, ctrd.LogTail(30))
	}
	if _, err := runtime.StartContainer(ctx, &runtimeapi.StartContainerRequest{ContainerId: ctr.ContainerId}); err != nil {
		t.Fatalf("StartContainer: %v\n%s", err, ctrd.LogTail(30))
	}
	logFile := filepath.Join(sandboxCfg.LogDirectory, "app", "0.log")
	waitFor(t, 30*time.Second, "the container to write its log", func() bool {
		b, _ := os.ReadFile(logFile)
		return strings.Contains(string(b), "written")
	})

	rt, closeRT, err := DialCRI(ctrd.Endpoint)
	if err != nil {
		t.Fatal(err)
	}
	defer closeRT()
	cfg := tree.monitorConfig(t)
	cfg.PodLogsDir = podLogs
	cfg.Runtime = rt
	m, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	pod := PodRef{UID: uid, Namespace: "shop", Name: "web", QOSClass: string(v1.PodQOSBurstable)}

	// containerd refreshes writable-layer usage on its own period (10 s by
	// default); wait for it to see the 20 MiB.
	var s *Snapshot
	waitFor(t, 40*time.Second, "the CRI to report the writable layer", func() bool {
		m.refreshLayers(ctx)
		s = m.Observe(ctx, []PodRef{pod})
		return orMinusOne(s.Pods[uid].Containers["app"].RootfsBytes) >= 20<<20
	})

	for _, sig := range []policy.Signal{policy.SignalImageFsAvailable, policy.SignalContainerFsAvailable, policy.SignalImageFsInodesFree} {
		r := readingOf(s, sig)
		if r.Source != SourceCRI {
			t.Errorf("%s source %q (missing: %s), want %q", sig, r.Source, s.Missing[sig], SourceCRI)
		}
	}
	if c := s.Observations[policy.SignalImageFsAvailable].Capacity; c != rootBytes {
		t.Errorf("imagefs capacity %d, want the %d-byte tmpfs containerd's root is on", c, rootBytes)
	}
	if !s.Layout.DedicatedImageFs {
		t.Errorf("layout %+v: images are on their own tmpfs, want dedicatedImageFs", s.Layout)
	}
	ps := s.Pods[uid]
	if got := s.PodCgroups[uid].Path; got != sandboxCfg.Linux.CgroupParent {
		t.Errorf("pod cgroup %q, want the sandbox's parent %q", got, sandboxCfg.Linux.CgroupParent)
	}
	// pause, sh and sleep.
	if orMinusOne(ps.Processes) != 3 {
		t.Errorf("pod processes %v, want 3 (pause, sh, sleep); errors: %s", deref(ps.Processes), s.PodErrors[uid])
	}
	app := ps.Containers["app"]
	// The 20 MiB file is on containerd's tmpfs: shmem charged to the container.
	if orMinusOne(app.MemoryWorkingSet) < 20<<20 {
		t.Errorf("app working set %v, want at least the 20 MiB it wrote to tmpfs", deref(app.MemoryWorkingSet))
	}
	if orMinusOne(ps.MemoryWorkingSet) < orMinusOne(app.MemoryWorkingSet) {
		t.Errorf("pod working set %v below its container's %v", deref(ps.MemoryWorkingSet), deref(app.MemoryWorkingSet))
	}
	if orMinusOne(app.LogsBytes) <= 0 {
		t.Errorf("app logs %v, want its log file's size", deref(app.LogsBytes))
	}
	if orMinusOne(ps.EphemeralStorageBytes) < 20<<20 {
		t.Errorf("pod ephemeral storage %v, want at least its writable layer", deref(ps.EphemeralStorageBytes))
	}
}

func waitFor(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", timeout, what)
		}
		time.Sleep(500 * time.Millisecond)
	}
}
