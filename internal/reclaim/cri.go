package reclaim

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/credentials/insecure"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// runtimeService is the part of the CRI runtime service the reclaimer calls. The signatures are
// those of k8s.io/cri-api's RuntimeService, so k8s.io/cri-client's client satisfies it too (the
// integration tests use it to set up and check the runtime independently of this client).
type runtimeService interface {
	Status(ctx context.Context, verbose bool) (*runtimeapi.StatusResponse, error)
	ListPodSandbox(ctx context.Context, filter *runtimeapi.PodSandboxFilter) ([]*runtimeapi.PodSandbox, error)
	StopPodSandbox(ctx context.Context, podSandboxID string) error
	RemovePodSandbox(ctx context.Context, podSandboxID string) error
	ListContainers(ctx context.Context, filter *runtimeapi.ContainerFilter) ([]*runtimeapi.Container, error)
	ContainerStatus(ctx context.Context, containerID string, verbose bool) (*runtimeapi.ContainerStatusResponse, error)
	StopContainer(ctx context.Context, containerID string, timeout int64) error
	RemoveContainer(ctx context.Context, containerID string) error
}

// imageService is the part of the CRI image service the reclaimer calls (cri-api's
// ImageManagerService signatures).
type imageService interface {
	ListImages(ctx context.Context, filter *runtimeapi.ImageFilter) ([]*runtimeapi.Image, error)
	RemoveImage(ctx context.Context, image *runtimeapi.ImageSpec) error
	ImageFsInfo(ctx context.Context) (*runtimeapi.ImageFsInfoResponse, error)
}

// CRI connection settings, those of k8s.io/cri-client (the kubelet's CRI client).
const (
	criMaxMsgSize        = 16 << 20 // answers of ListContainers on a busy node
	criBaseBackoffDelay  = 100 * time.Millisecond
	criMaxBackoffDelay   = 3 * time.Second
	criMinConnectTimeout = 5 * time.Second
)

// criClient calls a CRI endpoint through cri-api's generated gRPC clients, every call bounded by
// a timeout. It is what k8s.io/cri-client does for the calls above, without that module's
// OpenTelemetry instrumentation and component-base feature gates and metrics registry, which
// the agent does not use and which cost it about 1.5 MB of binary and their package
// initialisation's memory in every process (docs/scale.md).
type criClient struct {
	conn    *grpc.ClientConn
	runtime runtimeapi.RuntimeServiceClient
	images  runtimeapi.ImageServiceClient
	timeout time.Duration
}

// dialCRI connects to endpoint (unix:///path, or a bare /path) and checks, as the kubelet's
// client does before use, that it answers the CRI v1 API of the services it is dialled for: a
// Version call for the runtime service, an ImageFsInfo call for the image service, each bounded
// by timeout.
func dialCRI(endpoint string, timeout time.Duration, runtimeService, imageService bool) (*criClient, error) {
	target := endpoint
	if strings.HasPrefix(target, "/") {
		target = "unix://" + target
	}
	if !strings.HasPrefix(target, "unix://") {
		return nil, fmt.Errorf("CRI endpoint %q: must be a unix socket (unix:///path or /path)", endpoint)
	}
	params := grpc.ConnectParams{Backoff: backoff.DefaultConfig, MinConnectTimeout: criMinConnectTimeout}
	params.Backoff.BaseDelay, params.Backoff.MaxDelay = criBaseBackoffDelay, criMaxBackoffDelay
	conn, err := grpc.NewClient(target,
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithAuthority("localhost"),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(criMaxMsgSize)),
		grpc.WithConnectParams(params))
	if err != nil {
		return nil, err
	}
	c := &criClient{conn: conn, runtime: runtimeapi.NewRuntimeServiceClient(conn), images: runtimeapi.NewImageServiceClient(conn), timeout: timeout}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	if runtimeService {
		if _, err := c.runtime.Version(ctx, &runtimeapi.VersionRequest{}); err != nil {
			_ = conn.Close()
			return nil, fmt.Errorf("validate CRI v1 runtime API for endpoint %q: %w", endpoint, err)
		}
	}
	if imageService {
		if _, err := c.images.ImageFsInfo(ctx, &runtimeapi.ImageFsInfoRequest{}); err != nil {
			_ = conn.Close()
			return nil, fmt.Errorf("validate CRI v1 image API for endpoint %q: %w", endpoint, err)
		}
	}
	return c, nil
}

// Close closes the connection.
func (c *criClient) Close() error { return c.conn.Close() }

func (c *criClient) call(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, c.timeout)
}

// Status fails, as cri-client's does, on an answer without the RuntimeReady and NetworkReady
// conditions.
func (c *criClient) Status(ctx context.Context, verbose bool) (*runtimeapi.StatusResponse, error) {
	ctx, cancel := c.call(ctx)
	defer cancel()
	resp, err := c.runtime.Status(ctx, &runtimeapi.StatusRequest{Verbose: verbose})
	if err != nil {
		return nil, err
	}
	if resp.GetStatus() == nil || len(resp.GetStatus().GetConditions()) < 2 {
		return nil, errors.New("RuntimeReady or NetworkReady condition are not set")
	}
	return resp, nil
}

func (c *criClient) ListPodSandbox(ctx context.Context, filter *runtimeapi.PodSandboxFilter) ([]*runtimeapi.PodSandbox, error) {
	ctx, cancel := c.call(ctx)
	defer cancel()
	resp, err := c.runtime.ListPodSandbox(ctx, &runtimeapi.ListPodSandboxRequest{Filter: filter})
	if err != nil {
		return nil, err
	}
	return resp.GetItems(), nil
}

func (c *criClient) StopPodSandbox(ctx context.Context, podSandboxID string) error {
	ctx, cancel := c.call(ctx)
	defer cancel()
	_, err := c.runtime.StopPodSandbox(ctx, &runtimeapi.StopPodSandboxRequest{PodSandboxId: podSandboxID})
	return err
}

func (c *criClient) RemovePodSandbox(ctx context.Context, podSandboxID string) error {
	ctx, cancel := c.call(ctx)
	defer cancel()
	_, err := c.runtime.RemovePodSandbox(ctx, &runtimeapi.RemovePodSandboxRequest{PodSandboxId: podSandboxID})
	return err
}

func (c *criClient) ListContainers(ctx context.Context, filter *runtimeapi.ContainerFilter) ([]*runtimeapi.Container, error) {
	ctx, cancel := c.call(ctx)
	defer cancel()
	resp, err := c.runtime.ListContainers(ctx, &runtimeapi.ListContainersRequest{Filter: filter})
	if err != nil {
		return nil, err
	}
	return resp.GetContainers(), nil
}

func (c *criClient) ContainerStatus(ctx context.Context, containerID string, verbose bool) (*runtimeapi.ContainerStatusResponse, error) {
	ctx, cancel := c.call(ctx)
	defer cancel()
	return c.runtime.ContainerStatus(ctx, &runtimeapi.ContainerStatusRequest{ContainerId: containerID, Verbose: verbose})
}

// StopContainer waits the container's grace period (timeout, seconds) on top of the call
// timeout, for the runtime's SIGKILL after it.
func (c *criClient) StopContainer(ctx context.Context, containerID string, timeout int64) error {
	ctx, cancel := context.WithTimeout(ctx, c.timeout+time.Duration(timeout)*time.Second)
	defer cancel()
	_, err := c.runtime.StopContainer(ctx, &runtimeapi.StopContainerRequest{ContainerId: containerID, Timeout: timeout})
	return err
}

func (c *criClient) RemoveContainer(ctx context.Context, containerID string) error {
	ctx, cancel := c.call(ctx)
	defer cancel()
	_, err := c.runtime.RemoveContainer(ctx, &runtimeapi.RemoveContainerRequest{ContainerId: containerID})
	return err
}

func (c *criClient) ListImages(ctx context.Context, filter *runtimeapi.ImageFilter) ([]*runtimeapi.Image, error) {
	ctx, cancel := c.call(ctx)
	defer cancel()
	resp, err := c.images.ListImages(ctx, &runtimeapi.ListImagesRequest{Filter: filter})
	if err != nil {
		return nil, err
	}
	return resp.GetImages(), nil
}

func (c *criClient) RemoveImage(ctx context.Context, image *runtimeapi.ImageSpec) error {
	ctx, cancel := c.call(ctx)
	defer cancel()
	_, err := c.images.RemoveImage(ctx, &runtimeapi.RemoveImageRequest{Image: image})
	return err
}

func (c *criClient) ImageFsInfo(ctx context.Context) (*runtimeapi.ImageFsInfoResponse, error) {
	ctx, cancel := c.call(ctx)
	defer cancel()
	return c.images.ImageFsInfo(ctx, &runtimeapi.ImageFsInfoRequest{})
}
