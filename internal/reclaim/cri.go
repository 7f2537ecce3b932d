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
	"google.golang.org/protobuf/proto"
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
	// The monitor's reads (RuntimeStats).
	ListContainerStats(ctx context.Context, filter *runtimeapi.ContainerStatsFilter) ([]*runtimeapi.ContainerStats, error)
	RuntimeConfig(ctx context.Context) (*runtimeapi.RuntimeConfigResponse, error)
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

// newCRIClient makes the connection to endpoint (unix:///path, or a bare /path) without
// contacting it: gRPC connects on the first call and reconnects by itself, with the kubelet's
// backoff.
func newCRIClient(endpoint string, timeout time.Duration) (*criClient, error) {
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
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(criMaxMsgSize), grpc.ForceCodec(criCodec{})),
		grpc.WithConnectParams(params))
	if err != nil {
		return nil, err
	}
	return &criClient{conn: conn, runtime: runtimeapi.NewRuntimeServiceClient(conn), images: runtimeapi.NewImageServiceClient(conn), timeout: timeout}, nil
}

// criCodec is gRPC's proto codec, except that an answer is decoded from a buffer of its own size,
// garbage once decoded. gRPC's codec copies every answer longer than one HTTP/2 frame into a
// buffer of its process-wide pool, whose tiers round 32 KiB to 1 MiB up to 1 MiB, and the pool
// keeps it until the second garbage collection after the call: on a node of 110 pods,
// ListContainers (the image tracker) and ListContainerStats (the writable layers) answer about
// 100 KB each every 10 s, so the idle agent held such a buffer nearly all the time, and the
// collector counted it as live heap when it set its next goal (GOGC 50: 1.5 MiB more heap
// before it collects). Copying the answer once into an exact-size buffer costs the same as the
// pool's copy.
type criCodec struct{}

func (criCodec) Marshal(v any) ([]byte, error) {
	m, ok := v.(proto.Message)
	if !ok {
		return nil, fmt.Errorf("CRI codec: %T is not a protobuf message", v)
	}
	return proto.Marshal(m)
}

func (criCodec) Unmarshal(data []byte, v any) error {
	m, ok := v.(proto.Message)
	if !ok {
		return fmt.Errorf("CRI codec: %T is not a protobuf message", v)
	}
	return proto.Unmarshal(data, m)
}

// Name is the content subtype of gRPC's own protobuf codec: the runtime sees no difference.
func (criCodec) Name() string { return "proto" }

// validate checks, as the kubelet's client does before use, that the endpoint answers the CRI
// v1 API of the services it is used for: a Version call for the runtime service, an ImageFsInfo
// call for the image service, each bounded by the call timeout.
func (c *criClient) validate(endpoint string, runtimeService, imageService bool) error {
	ctx, cancel := context.WithTimeout(context.Background(), c.timeout)
	defer cancel()
	if runtimeService {
		if _, err := c.runtime.Version(ctx, &runtimeapi.VersionRequest{}); err != nil {
			return fmt.Errorf("validate CRI v1 runtime API for endpoint %q: %w", endpoint, err)
		}
	}
	if imageService {
		if _, err := c.images.ImageFsInfo(ctx, &runtimeapi.ImageFsInfoRequest{}); err != nil {
			return fmt.Errorf("validate CRI v1 image API for endpoint %q: %w", endpoint, err)
		}
	}
	return nil
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

func (c *criClient) ListContainerStats(ctx context.Context, filter *runtimeapi.ContainerStatsFilter) ([]*runtimeapi.ContainerStats, error) {
	ctx, cancel := c.call(ctx)
	defer cancel()
	resp, err := c.runtime.ListContainerStats(ctx, &runtimeapi.ListContainerStatsRequest{Filter: filter})
	if err != nil {
		return nil, err
	}
	return resp.GetStats(), nil
}

func (c *criClient) RuntimeConfig(ctx context.Context) (*runtimeapi.RuntimeConfigResponse, error) {
	ctx, cancel := c.call(ctx)
	defer cancel()
	return c.runtime.RuntimeConfig(ctx, &runtimeapi.RuntimeConfigRequest{})
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

// RuntimeStats is the monitor's view of the reclaimer's runtime connection (monitor.RuntimeStats
// and its cgroup driver query): the agent keeps one gRPC connection to the runtime, not one for
// reclaim and one for the monitor's reads (each is an HTTP/2 transport with its read and write
// buffers and five goroutines). Its calls do not wait for the reclaimer's check of the API
// version (a hung runtime would hold them for the call timeout): a runtime that is down shows as
// failed calls until it answers.
type RuntimeStats struct{ r *Reclaimer }

// RuntimeStats returns the reclaimer's connection for the monitor's reads; the error is an
// endpoint that is not a unix socket.
func (r *Reclaimer) RuntimeStats() (RuntimeStats, error) {
	for _, ep := range []string{r.opts.RuntimeEndpoint, r.opts.ImageEndpoint} {
		if _, err := r.client(ep); err != nil {
			return RuntimeStats{}, err
		}
	}
	return RuntimeStats{r: r}, nil
}

func (s RuntimeStats) ImageFsInfo(ctx context.Context) (*runtimeapi.ImageFsInfoResponse, error) {
	c, err := s.r.client(s.r.opts.ImageEndpoint)
	if err != nil {
		return nil, err
	}
	return c.ImageFsInfo(ctx)
}

func (s RuntimeStats) ListContainerStats(ctx context.Context, filter *runtimeapi.ContainerStatsFilter) ([]*runtimeapi.ContainerStats, error) {
	c, err := s.r.client(s.r.opts.RuntimeEndpoint)
	if err != nil {
		return nil, err
	}
	return c.ListContainerStats(ctx, filter)
}

func (s RuntimeStats) RuntimeConfig(ctx context.Context) (*runtimeapi.RuntimeConfigResponse, error) {
	c, err := s.r.client(s.r.opts.RuntimeEndpoint)
	if err != nil {
		return nil, err
	}
	return c.RuntimeConfig(ctx)
}
