//go:build integration

package reclaim

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/go-logr/logr"
	internalapi "k8s.io/cri-api/pkg/apis"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	criclient "k8s.io/cri-client/pkg"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/evictiond/evictiond/internal/testenv/containerd"
	"github.com/evictiond/evictiond/internal/testenv/images"
)

// criEnv is a private containerd with its root on a tmpfs (so statfs counts only its bytes),
// a host-like log tree, and a CRI client the test uses to play the kubelet.
type criEnv struct {
	t       testing.TB
	ctx     context.Context
	ctrd    *containerd.Containerd
	rt      internalapi.RuntimeService
	is      internalapi.ImageManagerService
	clock   *clocktesting.FakeClock
	logsDir string // stands for /var/log/pods
	linkDir string // stands for /var/log/containers
	stateF  string
	pause   images.Built
	busybox images.Built
}

// newCRIEnvB is newCRIEnv for benchmarks, with room for a few padded images.
func newCRIEnvB(b *testing.B) *criEnv { return newCRIEnv(b, 512<<20) }

func newCRIEnv(t testing.TB, rootBytes int64) *criEnv {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	t.Cleanup(cancel)
	ctrd := containerd.Start(t, containerd.Options{RootTmpfsBytes: rootBytes})
	logger := logr.FromSlogHandler(testLogger(t).Handler())
	rt, err := criclient.NewRemoteRuntimeService(ctrd.Endpoint, 30*time.Second, nil, &logger)
	if err != nil {
		t.Fatalf("CRI runtime client: %v", err)
	}
	is, err := criclient.NewRemoteImageService(ctrd.Endpoint, 30*time.Second, nil, &logger)
	if err != nil {
		t.Fatalf("CRI image client: %v", err)
	}
	t.Cleanup(func() { rt.Close(); is.Close() })

	dir := t.TempDir()
	e := &criEnv{
		t: t, ctx: ctx, ctrd: ctrd, rt: rt, is: is,
		clock:   clocktesting.NewFakeClock(time.Now()),
		logsDir: filepath.Join(dir, "pods"),
		linkDir: filepath.Join(dir, "containers"),
		stateF:  filepath.Join(dir, "state", "image-state.json"),
	}
	for _, d := range []string{e.logsDir, e.linkDir} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	pause, err := ctrd.ImportSandboxImage(ctx)
	if err != nil {
		t.Fatal(err)
	}
	e.pause = pause
	bb, err := images.Busybox("example.test/busybox:v1", "/bin/sh", "-c", "exit 0")
	if err != nil {
		t.Fatal(err)
	}
	e.busybox = e.importSpec(bb)
	return e
}

func testLogger(t testing.TB) *slog.Logger {
	return slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelInfo}))
}

type testWriter struct{ t testing.TB }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Helper()
	w.t.Log(string(p[:len(p)-1]))
	return len(p), nil
}

func (e *criEnv) importSpec(spec images.Spec) images.Built {
	e.t.Helper()
	built, err := images.Import(e.ctx, e.ctrd.Socket, containerd.CRINamespace, spec)
	if err != nil {
		e.t.Fatal(err)
	}
	return built
}

// importPadded imports a busybox image carrying size bytes of incompressible padding.
func (e *criEnv) importPadded(ref string, size int64) images.Built {
	e.t.Helper()
	spec, err := images.Busybox(ref, "/bin/sh", "-c", "exit 0")
	if err != nil {
		e.t.Fatal(err)
	}
	spec.Files = append(spec.Files, images.Padding("/pad", size, ref))
	return e.importSpec(spec)
}

// newReclaimer returns a Reclaimer on this env's containerd, logs and state file.
func (e *criEnv) newReclaimer(mutate func(*Options)) *Reclaimer {
	e.t.Helper()
	opts := Options{
		RuntimeEndpoint:  e.ctrd.Endpoint,
		CallTimeout:      30 * time.Second,
		ImageMinimumAge:  time.Hour,
		StateFile:        e.stateF,
		NodeFsPath:       e.logsDir,
		PodLogsDir:       e.logsDir,
		ContainerLogsDir: e.linkDir,
		Clock:            e.clock,
		Logger:           testLogger(e.t),
	}
	if mutate != nil {
		mutate(&opts)
	}
	r, err := New(opts)
	if err != nil {
		e.t.Fatalf("New: %v", err)
	}
	e.t.Cleanup(func() { r.Close() })
	return r
}

// pod is a pod sandbox run the way the kubelet runs one.
type pod struct {
	uid, name, namespace string
	sandboxID            string
	config               *runtimeapi.PodSandboxConfig
}

func (e *criEnv) runPod(name, uid string) *pod {
	e.t.Helper()
	p := &pod{uid: uid, name: name, namespace: "default"}
	p.config = &runtimeapi.PodSandboxConfig{
		Metadata:     &runtimeapi.PodSandboxMetadata{Name: name, Uid: uid, Namespace: p.namespace},
		LogDirectory: filepath.Join(e.logsDir, fmt.Sprintf("%s_%s_%s", p.namespace, name, uid)),
		Labels: map[string]string{
			"io.kubernetes.pod.name": name, "io.kubernetes.pod.namespace": p.namespace, labelPodUID: uid,
		},
		Linux: &runtimeapi.LinuxPodSandboxConfig{
			CgroupParent: e.ctrd.CgroupParent + "/" + uid,
			SecurityContext: &runtimeapi.LinuxSandboxSecurityContext{
				NamespaceOptions: &runtimeapi.NamespaceOption{Network: runtimeapi.NamespaceMode_NODE},
			},
		},
	}
	if err := os.MkdirAll(p.config.LogDirectory, 0o755); err != nil {
		e.t.Fatal(err)
	}
	id, err := e.rt.RunPodSandbox(e.ctx, p.config, "")
	if err != nil {
		e.t.Fatalf("RunPodSandbox %s: %v\n--- containerd log ---\n%s", name, err, e.ctrd.LogTail(30))
	}
	p.sandboxID = id
	return p
}

// runContainer creates container name (attempt) in p from image, starts it when start is set,
// and waits for it to exit when the command exits.
func (e *criEnv) runContainer(p *pod, name string, attempt uint32, image string, start bool, cmd ...string) string {
	e.t.Helper()
	cfg := &runtimeapi.ContainerConfig{
		Metadata: &runtimeapi.ContainerMetadata{Name: name, Attempt: attempt},
		Image:    &runtimeapi.ImageSpec{Image: image},
		Command:  cmd,
		LogPath:  fmt.Sprintf("%s/%d.log", name, attempt),
		Labels: map[string]string{
			labelPodUID: p.uid, labelContainerName: name,
			"io.kubernetes.pod.name": p.name, "io.kubernetes.pod.namespace": p.namespace,
		},
	}
	id, err := e.rt.CreateContainer(e.ctx, p.sandboxID, cfg, p.config)
	if err != nil {
		e.t.Fatalf("CreateContainer %s/%s: %v\n--- containerd log ---\n%s", p.name, name, err, e.ctrd.LogTail(30))
	}
	if !start {
		return id
	}
	if err := e.rt.StartContainer(e.ctx, id); err != nil {
		e.t.Fatalf("StartContainer %s/%s: %v\n--- containerd log ---\n%s", p.name, name, err, e.ctrd.LogTail(30))
	}
	return id
}

// waitExited waits until container id has exited.
func (e *criEnv) waitExited(id string) {
	e.t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		st, err := e.rt.ContainerStatus(e.ctx, id, false)
		if err != nil {
			e.t.Fatalf("ContainerStatus %s: %v", id, err)
		}
		if st.GetStatus().GetState() == runtimeapi.ContainerState_CONTAINER_EXITED {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	e.t.Fatalf("container %s did not exit within 30s", id)
}

// stopPod stops p's sandbox, as the kubelet does when the pod terminates.
func (e *criEnv) stopPod(p *pod) {
	e.t.Helper()
	if err := e.rt.StopPodSandbox(e.ctx, p.sandboxID); err != nil {
		e.t.Fatalf("StopPodSandbox %s: %v", p.name, err)
	}
}

func (e *criEnv) containerIDs() map[string]bool {
	e.t.Helper()
	cs, err := e.rt.ListContainers(e.ctx, &runtimeapi.ContainerFilter{})
	if err != nil {
		e.t.Fatal(err)
	}
	out := map[string]bool{}
	for _, c := range cs {
		out[c.Id] = true
	}
	return out
}

func (e *criEnv) sandboxIDs() map[string]bool {
	e.t.Helper()
	sbs, err := e.rt.ListPodSandbox(e.ctx, &runtimeapi.PodSandboxFilter{})
	if err != nil {
		e.t.Fatal(err)
	}
	out := map[string]bool{}
	for _, sb := range sbs {
		out[sb.Id] = true
	}
	return out
}

func (e *criEnv) imageIDs() map[string]bool {
	e.t.Helper()
	imgs, err := e.is.ListImages(e.ctx, &runtimeapi.ImageFilter{})
	if err != nil {
		e.t.Fatal(err)
	}
	out := map[string]bool{}
	for _, img := range imgs {
		out[img.Id] = true
	}
	return out
}
