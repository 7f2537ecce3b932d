package reclaim

import (
	"context"
	"net"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// stubRuntime is an in-process CRI runtime service on a real gRPC server and unix socket: only
// the calls the tests below make.
type stubRuntime struct {
	runtimeapi.UnimplementedRuntimeServiceServer
	conditions []*runtimeapi.RuntimeCondition
	block      chan struct{} // ListContainers waits on it
}

func (s *stubRuntime) Version(context.Context, *runtimeapi.VersionRequest) (*runtimeapi.VersionResponse, error) {
	return &runtimeapi.VersionResponse{RuntimeApiVersion: "v1"}, nil
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
func serveCRI(t *testing.T, srv runtimeapi.RuntimeServiceServer) string {
	t.Helper()
	sock := filepath.Join(t.TempDir(), "cri.sock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	s := grpc.NewServer()
	if srv != nil {
		runtimeapi.RegisterRuntimeServiceServer(s, srv)
	}
	go func() { _ = s.Serve(l) }()
	t.Cleanup(s.Stop)
	return "unix://" + sock
}

func TestDialCRIRejectsANonUnixEndpoint(t *testing.T) {
	_, err := dialCRI("tcp://127.0.0.1:1234", time.Second, true, true)
	if err == nil || !strings.Contains(err.Error(), `"tcp://127.0.0.1:1234"`) || !strings.Contains(err.Error(), "unix socket") {
		t.Fatalf("err = %v, want one naming the endpoint and the unix-socket rule", err)
	}
}

func TestDialCRIChecksTheV1API(t *testing.T) {
	_, err := dialCRI(serveCRI(t, nil), 5*time.Second, true, false)
	if err == nil || !strings.Contains(err.Error(), "validate CRI v1 runtime API") || status.Code(err) != codes.Unimplemented {
		t.Fatalf("err = %v, want the v1 runtime API check failing as Unimplemented", err)
	}
	// The stub serves the runtime service only: dialled for images too, the image check fails.
	ep := serveCRI(t, &stubRuntime{})
	_, err = dialCRI(ep, 5*time.Second, true, true)
	if err == nil || !strings.Contains(err.Error(), "validate CRI v1 image API") || status.Code(err) != codes.Unimplemented {
		t.Fatalf("err = %v, want the v1 image API check failing as Unimplemented", err)
	}
	c, err := dialCRI(strings.TrimPrefix(ep, "unix://"), 5*time.Second, true, false)
	if err != nil {
		t.Fatalf("bare socket path of a v1 runtime: %v", err)
	}
	_ = c.Close()
}

func TestCRIStatusNeedsBothConditions(t *testing.T) {
	stub := &stubRuntime{conditions: []*runtimeapi.RuntimeCondition{{Type: runtimeapi.RuntimeReady, Status: true}}}
	c, err := dialCRI(serveCRI(t, stub), 5*time.Second, true, false)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
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
	c, err := dialCRI(serveCRI(t, stub), 200*time.Millisecond, true, false)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	start := time.Now()
	_, err = c.ListContainers(context.Background(), nil)
	if status.Code(err) != codes.DeadlineExceeded {
		t.Fatalf("ListContainers on a runtime that does not answer: err = %v, want DeadlineExceeded", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("ListContainers returned after %s, want about the 200ms call timeout", d)
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
