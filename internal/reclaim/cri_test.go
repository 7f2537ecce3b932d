package reclaim

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// stubRuntime is an in-process CRI runtime service on a real gRPC server and unix socket: only
// the calls the tests below make.
type stubRuntime struct {
	runtimeapi.UnimplementedRuntimeServiceServer
	conditions   []*runtimeapi.RuntimeCondition
	block        chan struct{} // ListContainers waits on it
	blockVersion chan struct{} // Version waits on it, when set
	images       bool          // serve an image service too (ImageFsInfo only)
}

type stubImages struct {
	runtimeapi.UnimplementedImageServiceServer
}

func (stubImages) ImageFsInfo(context.Context, *runtimeapi.ImageFsInfoRequest) (*runtimeapi.ImageFsInfoResponse, error) {
	return &runtimeapi.ImageFsInfoResponse{}, nil
}

func (s *stubRuntime) Version(ctx context.Context, _ *runtimeapi.VersionRequest) (*runtimeapi.VersionResponse, error) {
	if s.blockVersion != nil {
		select {
		case <-s.blockVersion:
		case <-ctx.Done():
		}
	}
	return &runtimeapi.VersionResponse{RuntimeApiVersion: "v1"}, nil
}

func (s *stubRuntime) ListContainerStats(context.Context, *runtimeapi.ListContainerStatsRequest) (*runtimeapi.ListContainerStatsResponse, error) {
	return &runtimeapi.ListContainerStatsResponse{Stats: []*runtimeapi.ContainerStats{{Attributes: &runtimeapi.ContainerAttributes{Id: "c1"}}}}, nil
}

func (s *stubRuntime) Status(context.Context, *runtimeapi.StatusRequest) (*runtimeapi.StatusResponse, error) {
	return &runtimeapi.StatusResponse{Status: &runtimeapi.RuntimeStatus{Conditions: s.conditions}}, nil
}

func (s *stubRuntime) ListContainers(ctx context.Context, _ *runtimeapi.ListContainersRequest) (*runtimeapi.ListContainersResponse, error) {
	select {
	case <-s.block:
	case <-ctx.Done():
	}
	return &runtimeapi.ListContainersResponse{}, nil
}

// serveCRI serves srv (nil: a gRPC server with no CRI service) on a socket and returns its endpoint.
func serveCRI(t testing.TB, srv runtimeapi.RuntimeServiceServer) string {
	t.Helper()
	sock := filepath.Join(t.TempDir(), "cri.sock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	s := grpc.NewServer()
	if srv != nil {
		runtimeapi.RegisterRuntimeServiceServer(s, srv)
		if stub, ok := srv.(*stubRuntime); ok && stub.images {
			runtimeapi.RegisterImageServiceServer(s, stubImages{})
		}
	}
	go func() { _ = s.Serve(l) }()
	t.Cleanup(s.Stop)
	return "unix://" + sock
}

// dialCRI is a checked client of endpoint, as the reclaimer makes it.
func dialCRI(t *testing.T, endpoint string, timeout time.Duration, runtimeService, imageService bool) (*criClient, error) {
	t.Helper()
	c, err := newCRIClient(endpoint, timeout)
	if err != nil {
		return nil, err
	}
	t.Cleanup(func() { _ = c.Close() })
	return c, c.validate(endpoint, runtimeService, imageService)
}

func TestDialCRIRejectsANonUnixEndpoint(t *testing.T) {
	_, err := newCRIClient("tcp://127.0.0.1:1234", time.Second)
	if err == nil || !strings.Contains(err.Error(), `"tcp://127.0.0.1:1234"`) || !strings.Contains(err.Error(), "unix socket") {
		t.Fatalf("err = %v, want one naming the endpoint and the unix-socket rule", err)
	}
	r, err := New(Options{RuntimeEndpoint: "tcp://127.0.0.1:1234", StateFile: filepath.Join(t.TempDir(), "state.json")})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.RuntimeStats(); err == nil || !strings.Contains(err.Error(), "unix socket") {
		t.Fatalf("RuntimeStats of a TCP endpoint: err = %v, want the unix-socket rule", err)
	}
}

func TestDialCRIChecksTheV1API(t *testing.T) {
	_, err := dialCRI(t, serveCRI(t, nil), 5*time.Second, true, false)
	if err == nil || !strings.Contains(err.Error(), "validate CRI v1 runtime API") || status.Code(err) != codes.Unimplemented {
		t.Fatalf("err = %v, want the v1 runtime API check failing as Unimplemented", err)
	}
	// The stub serves the runtime service only: dialled for images too, the image check fails.
	ep := serveCRI(t, &stubRuntime{})
	_, err = dialCRI(t, ep, 5*time.Second, true, true)
	if err == nil || !strings.Contains(err.Error(), "validate CRI v1 image API") || status.Code(err) != codes.Unimplemented {
		t.Fatalf("err = %v, want the v1 image API check failing as Unimplemented", err)
	}
	if _, err := dialCRI(t, strings.TrimPrefix(ep, "unix://"), 5*time.Second, true, false); err != nil {
		t.Fatalf("bare socket path of a v1 runtime: %v", err)
	}
}

func TestCRIStatusNeedsBothConditions(t *testing.T) {
	stub := &stubRuntime{conditions: []*runtimeapi.RuntimeCondition{{Type: runtimeapi.RuntimeReady, Status: true}}}
	c, err := dialCRI(t, serveCRI(t, stub), 5*time.Second, true, false)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Status(context.Background(), false); err == nil || !strings.Contains(err.Error(), "NetworkReady") {
		t.Fatalf("Status with one condition: err = %v, want the missing condition named", err)
	}
	stub.conditions = append(stub.conditions, &runtimeapi.RuntimeCondition{Type: runtimeapi.NetworkReady, Status: true})
	if _, err := c.Status(context.Background(), false); err != nil {
		t.Fatalf("Status with both conditions: %v", err)
	}
}

func TestCRICallsAreBoundedByTheTimeout(t *testing.T) {
	stub := &stubRuntime{block: make(chan struct{})}
	defer close(stub.block)
	c, err := dialCRI(t, serveCRI(t, stub), 200*time.Millisecond, true, false)
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	_, err = c.ListContainers(context.Background(), nil)
	if status.Code(err) != codes.DeadlineExceeded {
		t.Fatalf("ListContainers on a runtime that does not answer: err = %v, want DeadlineExceeded", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("ListContainers returned after %s, want about the 200ms call timeout", d)
	}
}

// The monitor reads through the reclaimer's connection (one per endpoint for the agent), and
// does not wait for the reclaimer's check of the runtime, which a hung runtime holds for the
// call timeout.
func TestRuntimeStatsShareTheReclaimersConnectionWithoutWaitingForItsCheck(t *testing.T) {
	stub := &stubRuntime{blockVersion: make(chan struct{}), images: true}
	ep := serveCRI(t, stub)
	r, err := New(Options{RuntimeEndpoint: ep, ImageEndpoint: ep, CallTimeout: time.Minute, StateFile: filepath.Join(t.TempDir(), "state.json")})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	checked := make(chan error, 1)
	go func() { _, _, err := r.connect(); checked <- err }()
	rs, err := r.RuntimeStats()
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	stats, err := rs.ListContainerStats(context.Background(), nil)
	if err != nil || len(stats) != 1 || stats[0].GetAttributes().GetId() != "c1" {
		t.Fatalf("ListContainerStats while the reclaimer's Version check waits: %v, %v", stats, err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("ListContainerStats took %s while the reclaimer's check waited, want at once", d)
	}
	select {
	case err := <-checked:
		t.Fatalf("the reclaimer's check ended before the runtime answered Version: %v", err)
	default:
	}
	close(stub.blockVersion)
	if err := <-checked; err != nil {
		t.Fatalf("the reclaimer's check: %v", err)
	}
	r.clientsMu.Lock()
	n, c := len(r.clients), r.clients[ep]
	r.clientsMu.Unlock()
	if n != 1 || r.runtime != runtimeService(c) || r.images != imageService(c) {
		t.Errorf("%d connections (runtime %p, images %p, monitor's %p), want one for both", n, r.runtime, r.images, c)
	}
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := rs.ListContainerStats(context.Background(), nil); err == nil {
		t.Error("ListContainerStats after Close: no error")
	}
}

// The agent calls the CRI through cri-api's generated clients: k8s.io/cri-client, and the
// OpenTelemetry and component-base packages it brings, must not come back into the binary
// (1.4 MB of it and their initialisation in every process, docs/scale.md).
func TestBinaryDoesNotLinkCRIClient(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", "../../cmd/evictiond").Output()
	if err != nil {
		t.Fatalf("go list -deps cmd/evictiond: %v", err)
	}
	var cri bool
	for _, pkg := range strings.Fields(string(out)) {
		for _, f := range []string{"k8s.io/cri-client", "go.opentelemetry.io", "k8s.io/component-base"} {
			if pkg == f || strings.HasPrefix(pkg, f+"/") {
				t.Errorf("cmd/evictiond links %s: call the CRI through criClient (k8s.io/cri-api's gRPC clients)", pkg)
			}
		}
		cri = cri || pkg == "k8s.io/cri-api/pkg/apis/runtime/v1"
	}
	if !cri {
		t.Errorf("go list found no k8s.io/cri-api in cmd/evictiond's dependencies:\n%s", out)
	}
}

// bigRuntime answers ListContainers with many containers, as a busy node's runtime does.
type bigRuntime struct {
	stubRuntime
	resp *runtimeapi.ListContainersResponse
}

func (s *bigRuntime) ListContainers(context.Context, *runtimeapi.ListContainersRequest) (*runtimeapi.ListContainersResponse, error) {
	return s.resp, nil
}

// kubeletContainers are n running containers with the labels and annotations the kubelet sets.
func kubeletContainers(n int) *runtimeapi.ListContainersResponse {
	r := &runtimeapi.ListContainersResponse{}
	for i := range n {
		id := fmt.Sprintf("%064x", i)
		r.Containers = append(r.Containers, &runtimeapi.Container{Id: id, PodSandboxId: fmt.Sprintf("%064x", 1<<20+i),
			Metadata: &runtimeapi.ContainerMetadata{Name: "idle"}, Image: &runtimeapi.ImageSpec{Image: "sha256:" + id},
			ImageRef: "sha256:" + id, State: runtimeapi.ContainerState_CONTAINER_RUNNING, CreatedAt: int64(i),
			Labels: map[string]string{"io.kubernetes.container.name": "idle", "io.kubernetes.pod.name": fmt.Sprintf("idle-%03d", i),
				"io.kubernetes.pod.namespace": "bench-footprint", "io.kubernetes.pod.uid": fmt.Sprintf("%08d-aaaa-bbbb-cccc-dddddddddddd", i)},
			Annotations: map[string]string{"io.kubernetes.container.hash": "1234abcd", "io.kubernetes.container.restartCount": "0",
				"io.kubernetes.container.terminationMessagePath":   "/dev/termination-log",
				"io.kubernetes.container.terminationMessagePolicy": "File", "io.kubernetes.pod.terminationGracePeriod": "30"}})
	}
	return r
}

// An answer of many HTTP/2 frames comes through criCodec whole.
func TestCRICodecDecodesALongAnswer(t *testing.T) {
	want := kubeletContainers(110)
	if n := proto.Size(want); n < 64<<10 {
		t.Fatalf("the answer is %d bytes, want one of several 16 KiB frames", n)
	}
	c, err := dialCRI(t, serveCRI(t, &bigRuntime{resp: want}), 5*time.Second, true, false)
	if err != nil {
		t.Fatal(err)
	}
	got, err := c.ListContainers(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	if !proto.Equal(&runtimeapi.ListContainersResponse{Containers: got}, want) {
		t.Fatalf("ListContainers through criCodec: %d containers, not what the runtime sent", len(got))
	}
}

// stubRuntimeSocketEnv, set, makes the test binary a runtime answering ListContainers with 110
// kubelet containers on that socket (TestMain), for BenchmarkCRIAnswerHeld.
const stubRuntimeSocketEnv = "EVICTIOND_TEST_STUB_RUNTIME_SOCKET"

func TestMain(m *testing.M) {
	if sock := os.Getenv(stubRuntimeSocketEnv); sock != "" {
		l, err := net.Listen("unix", sock)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		s := grpc.NewServer()
		runtimeapi.RegisterRuntimeServiceServer(s, &bigRuntime{resp: kubeletContainers(110)})
		_ = s.Serve(l)
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// BenchmarkCRIAnswerHeld reports the heap still held after one ListContainers of 110 kubelet
// containers (about 86 KB on the wire, from a runtime in another process) and one garbage
// collection: what gRPC's codec keeps in its buffer pool, against criCodec.
func BenchmarkCRIAnswerHeld(b *testing.B) {
	sock := filepath.Join(b.TempDir(), "cri.sock")
	srv := exec.Command(os.Args[0], "-test.run=^$")
	srv.Env = append(os.Environ(), stubRuntimeSocketEnv+"="+sock)
	if err := srv.Start(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = srv.Process.Kill(); _ = srv.Wait() })
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if _, err := os.Stat(sock); err == nil {
			break
		}
		if time.Now().After(deadline) {
			b.Fatal("the stub runtime did not listen within 10s")
		}
	}
	for _, codec := range []string{"grpc", "evictiond"} {
		b.Run("codec="+codec, func(b *testing.B) {
			opts := []grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}
			if codec == "evictiond" {
				opts = append(opts, grpc.WithDefaultCallOptions(grpc.ForceCodec(criCodec{})))
			}
			conn, err := grpc.NewClient("unix://"+sock, opts...)
			if err != nil {
				b.Fatal(err)
			}
			defer conn.Close()
			rs := runtimeapi.NewRuntimeServiceClient(conn)
			var held float64
			for range b.N {
				for range 3 { // empties the pool's victim cache of earlier calls
					runtime.GC()
				}
				var before, after runtime.MemStats
				runtime.ReadMemStats(&before)
				if _, err := rs.ListContainers(context.Background(), &runtimeapi.ListContainersRequest{}); err != nil {
					b.Fatal(err)
				}
				runtime.GC()
				runtime.ReadMemStats(&after)
				held += float64(after.HeapAlloc) - float64(before.HeapAlloc)
			}
			b.ReportMetric(held/float64(b.N)/1024, "held-KiB")
		})
	}
}
