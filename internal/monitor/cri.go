package monitor

import (
	"context"
	"fmt"
	"strings"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// criStats reads the two stats calls the monitor needs straight from a CRI
// gRPC connection, for `evictiond observe`. The daemon passes internal/reclaim's
// connection instead (reclaim.RuntimeStats), so the agent has one.
type criStats struct {
	runtime runtimeapi.RuntimeServiceClient
	images  runtimeapi.ImageServiceClient
}

// DialCRI connects to a CRI endpoint (unix:///run/containerd/containerd.sock
// or a bare socket path) for RuntimeStats. gRPC connects lazily: a runtime
// that is down shows up as failed calls, which the monitor reports.
func DialCRI(endpoint string) (RuntimeStats, func() error, error) {
	target := endpoint
	if strings.HasPrefix(target, "/") {
		target = "unix://" + target
	}
	if !strings.HasPrefix(target, "unix://") {
		return nil, nil, fmt.Errorf("runtime endpoint %q: must be a unix socket (unix:///path or /path)", endpoint)
	}
	conn, err := grpc.NewClient(target, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, nil, fmt.Errorf("connecting to the CRI at %s: %w", endpoint, err)
	}
	return &criStats{runtime: runtimeapi.NewRuntimeServiceClient(conn), images: runtimeapi.NewImageServiceClient(conn)}, conn.Close, nil
}

func (c *criStats) ImageFsInfo(ctx context.Context) (*runtimeapi.ImageFsInfoResponse, error) {
	return c.images.ImageFsInfo(ctx, &runtimeapi.ImageFsInfoRequest{})
}

func (c *criStats) ListContainerStats(ctx context.Context, filter *runtimeapi.ContainerStatsFilter) ([]*runtimeapi.ContainerStats, error) {
	resp, err := c.runtime.ListContainerStats(ctx, &runtimeapi.ListContainerStatsRequest{Filter: filter})
	if err != nil {
		return nil, err
	}
	return resp.GetStats(), nil
}

// RuntimeConfig is the runtime's cgroup driver, which the kubelet uses over
// its own configuration (KubeletCgroupDriverFromCRI, GA in 1.34).
func (c *criStats) RuntimeConfig(ctx context.Context) (*runtimeapi.RuntimeConfigResponse, error) {
	return c.runtime.RuntimeConfig(ctx, &runtimeapi.RuntimeConfigRequest{})
}
