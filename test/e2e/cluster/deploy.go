//go:build e2e

package cluster

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/restmapper"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"
	"sigs.k8s.io/yaml"

	"github.com/evictiond/evictiond/internal/testenv/proc"
)

// Where deploy/ puts evictiond; the e2e overlay keeps these names.
const (
	EvictiondNamespace = "evictiond-system"
	EvictiondDaemonSet = "evictiond"
	EvictiondConfigMap = "evictiond-config"
	// EvictiondImage is the reference `make image` tags the image with (Makefile IMAGE).
	EvictiondImage = "evictiond.io/evictiond:dev"
)

// fieldManager names the harness as the owner of what it applies (server-side apply).
const fieldManager = "evictiond-e2e"

// DeployOptions shape DeployEvictiond.
type DeployOptions struct {
	// ImageArchive is evictiond's image as written by `make image`. Default
	// $EVICTIOND_IMAGE_TAR; when both are empty, `make image` is run in the repository.
	ImageArchive string
	// Config, when set, replaces the ConfigMap's config.yaml (an EvictionConfiguration).
	Config string
	// ReadyTimeout bounds the wait for the DaemonSet's pod to be Ready. Default 2 min.
	ReadyTimeout time.Duration
	// Helm, when set, is a helm binary: evictiond is installed from charts/evictiond with
	// `helm install` (HelmValues) instead of applying deploy/ through the e2e overlay.
	Helm string
	// ExtraArgs are added to `evictiond run`'s (overlay only).
	ExtraArgs []string
}

// DeployEvictiond imports evictiond's image, renders deploy/ through the e2e overlay
// (test/e2e/overlay) plus this run's paths and ports, applies it, and waits until the
// DaemonSet's pod on the node is Ready. It returns that pod. On a timeout the error carries
// the pod's status and the tail of its log.
func (c *Cluster) DeployEvictiond(ctx context.Context, opts DeployOptions) (*corev1.Pod, error) {
	if opts.ReadyTimeout == 0 {
		opts.ReadyTimeout = 2 * time.Minute
	}
	root, err := repoRoot()
	if err != nil {
		return nil, err
	}
	archive := opts.ImageArchive
	if archive == "" {
		archive = os.Getenv("EVICTIOND_IMAGE_TAR")
	}
	if archive == "" {
		// This machine's platform only: the index's other platforms are make image's business.
		cmd := exec.CommandContext(ctx, "make", "--no-print-directory", "image", "IMAGE_PLATFORMS=linux/"+runtime.GOARCH)
		cmd.Dir = root
		if out, err := cmd.CombinedOutput(); err != nil {
			return nil, fmt.Errorf("make image: %w: %s", err, out)
		}
		archive = filepath.Join(root, "bin", "evictiond-image.tar")
	}
	if err := c.ImportArchive(ctx, archive); err != nil {
		return nil, fmt.Errorf("importing evictiond's image %s: %w", archive, err)
	}
	if opts.Helm != "" && len(opts.ExtraArgs) > 0 {
		return nil, fmt.Errorf("DeployOptions.ExtraArgs: %q: only with the overlay, not with Helm", opts.ExtraArgs)
	}
	if opts.Helm != "" {
		if err := c.HelmInstallEvictiond(ctx, opts.Helm, root, opts.Config); err != nil {
			return nil, err
		}
		return c.WaitEvictiondReady(ctx, opts.ReadyTimeout)
	}
	manifests, err := c.RenderEvictiond(root, opts.Config, opts.ExtraArgs...)
	if err != nil {
		return nil, err
	}
	if err := c.Apply(ctx, manifests); err != nil {
		return nil, err
	}
	return c.WaitEvictiondReady(ctx, opts.ReadyTimeout)
}

// apiPort is the API server's port, which evictiond reaches on loopback (the node has no
// kube-proxy, so the in-cluster Service address would lead nowhere).
func (c *Cluster) apiPort() (string, error) {
	port := strings.TrimPrefix(c.Config.Host[strings.LastIndex(c.Config.Host, ":"):], ":")
	if _, err := strconv.Atoi(port); err != nil {
		return "", fmt.Errorf("API server host %q: no port", c.Config.Host)
	}
	return port, nil
}

// HelmRelease is the release name HelmInstallEvictiond installs: the chart then names its
// objects as deploy/ does (EvictiondDaemonSet, EvictiondConfigMap).
const HelmRelease = "evictiond"

// HelmValues are the chart values of this run: what the e2e overlay and RenderEvictiond
// change in deploy/, as the chart's values (image pull policy Never, no mount propagation,
// the API server on loopback, the private containerd's socket directory, the kubelet's
// directories, the e2e EvictionConfiguration of test/e2e/overlay/configmap-patch.yaml, or
// config when set, as configYAML), and the chart's securityContext without the capabilities
// this machine's runtime lacks (runtimeCapabilities).
func (c *Cluster) HelmValues(repoRoot, config string) (map[string]any, error) {
	apiPort, err := c.apiPort()
	if err != nil {
		return nil, err
	}
	if config == "" {
		patch, err := os.ReadFile(filepath.Join(repoRoot, "test", "e2e", "overlay", "configmap-patch.yaml"))
		if err != nil {
			return nil, fmt.Errorf("reading the e2e configuration: %w", err)
		}
		var cm struct {
			Data map[string]string `json:"data"`
		}
		if err := yaml.Unmarshal(patch, &cm); err != nil || cm.Data["config.yaml"] == "" {
			return nil, fmt.Errorf("test/e2e/overlay/configmap-patch.yaml: no data.config.yaml (%v)", err)
		}
		config = cm.Data["config.yaml"]
	}
	values := map[string]any{
		"image": map[string]any{"pullPolicy": "Never"},
		// Verbatim, as the overlay has it: `config` would be deep-merged with the chart's
		// default thresholds, and the scenarios edit this text.
		"configYAML": config,
		// See test/e2e/overlay/daemonset-patch.yaml: this machine's / is a private mount.
		"host": map[string]any{
			"rootMountPropagation": "None",
			"criSocketDir":         c.Containerd.Dir,
			"podLogsDir":           c.PodLogsDir,
			"stateDir":             filepath.Join(c.Dir, "evictiond-state"),
		},
		"extraArgs": []string{"--kubelet-root-dir=" + c.KubeletRootDir, "--image-fs-dir=" + c.Containerd.Root},
		"extraEnv": []map[string]string{
			{"name": "KUBERNETES_SERVICE_HOST", "value": "127.0.0.1"},
			{"name": "KUBERNETES_SERVICE_PORT", "value": apiPort},
		},
	}
	keep, reduced, err := runtimeCapabilities(repoRoot)
	if err != nil {
		return nil, err
	}
	if reduced { // Helm deep-merges maps: only the list changes
		values["securityContext"] = map[string]any{"capabilities": map[string]any{"add": keep}}
	}
	return values, nil
}

// HelmInstallEvictiond runs `helm install` of charts/evictiond into EvictiondNamespace
// (created by Helm) with HelmValues, and waits for nothing (see WaitEvictiondReady).
func (c *Cluster) HelmInstallEvictiond(ctx context.Context, helm, repoRoot, config string) error {
	values, err := c.HelmValues(repoRoot, config)
	if err != nil {
		return err
	}
	data, err := yaml.Marshal(values)
	if err != nil {
		return fmt.Errorf("encoding the chart values: %w", err)
	}
	valuesFile := filepath.Join(c.Dir, "helm-values.yaml")
	if err := os.WriteFile(valuesFile, data, 0o644); err != nil {
		return fmt.Errorf("writing %s: %w", valuesFile, err)
	}
	out, err := c.Helm(ctx, helm, "install", HelmRelease, filepath.Join(repoRoot, "charts", "evictiond"),
		"--namespace", EvictiondNamespace, "--create-namespace", "-f", valuesFile)
	if err != nil {
		return fmt.Errorf("helm install evictiond charts/evictiond -f %s: %w\n%s", valuesFile, err, out)
	}
	return nil
}

// Helm runs the helm binary against the cluster (its admin kubeconfig) and returns its
// combined output.
func (c *Cluster) Helm(ctx context.Context, helm string, args ...string) ([]byte, error) {
	cmd := exec.CommandContext(ctx, helm, append([]string{"--kubeconfig", c.KubeconfigPath}, args...)...)
	// Helm's caches and configuration stay inside the cluster's tree.
	cmd.Env = append(os.Environ(), "HELM_CACHE_HOME="+filepath.Join(c.Dir, "helm", "cache"),
		"HELM_CONFIG_HOME="+filepath.Join(c.Dir, "helm", "config"), "HELM_DATA_HOME="+filepath.Join(c.Dir, "helm", "data"))
	return cmd.CombinedOutput()
}

// RenderEvictiond builds the e2e overlay with this run's values layered on top: the API
// server's loopback port (the node has no kube-proxy, so the in-cluster Service address
// would lead nowhere; evictiond runs on the host network and reaches the API server on
// loopback), the private containerd's socket, the kubelet's pod logs directory and a state
// directory inside the cluster's tree, and the kubelet's root dir and containerd's root as
// flags (read under --host-root). The containerd directory is mounted where deploy/ mounts
// /run/containerd: its socket is named containerd.sock there too. config, when set,
// replaces config.yaml; extraArgs are added to the command line.
func (c *Cluster) RenderEvictiond(repoRoot, config string, extraArgs ...string) ([]byte, error) {
	dir := filepath.Join(c.Dir, "overlay-run")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("creating %s: %w", dir, err)
	}
	apiPort, err := c.apiPort()
	if err != nil {
		return nil, err
	}
	patch := fmt.Sprintf(`apiVersion: apps/v1
kind: DaemonSet
metadata:
  name: %[1]s
  namespace: %[2]s
spec:
  template:
    spec:
      containers:
        - name: evictiond
          args:
            - run
            - --config=/etc/evictiond/config.yaml
            - --host-root=/host
            - --metrics-address=:9809
            - --health-address=:9810
            - --kubelet-root-dir=%[7]s
            - --image-fs-dir=%[8]s
            - --pod-logs-dir=%[5]s
%[9]s          # deploy/ mounts the pod logs at /host/var/log/pods, a mount point the read-only
          # host mount must already hold; this machine has no /var/log/pods (the kubelet's
          # logs are in the cluster's tree), so the volume goes where the logs are.
          volumeMounts:
            - mountPath: /host/var/log/pods
              $patch: delete
            - name: pod-logs
              mountPath: /host%[5]s
          env:
            - {name: KUBERNETES_SERVICE_HOST, value: "127.0.0.1"}
            - {name: KUBERNETES_SERVICE_PORT, value: %[3]q}
      volumes:
        - name: cri-run
          hostPath: {path: %[4]q, type: Directory}
        - name: pod-logs
          hostPath: {path: %[5]q, type: DirectoryOrCreate}
        - name: state
          hostPath: {path: %[6]q, type: DirectoryOrCreate}
`, EvictiondDaemonSet, EvictiondNamespace, apiPort, c.Containerd.Dir, c.PodLogsDir, filepath.Join(c.Dir, "evictiond-state"),
		c.KubeletRootDir, c.Containerd.Root, extraArgLines(extraArgs))
	// kustomize takes no absolute resource paths: point at the overlay relative to dir.
	overlay, err := filepath.Rel(dir, filepath.Join(repoRoot, "test", "e2e", "overlay"))
	if err != nil {
		return nil, fmt.Errorf("locating the e2e overlay from %s: %w", dir, err)
	}
	kustomization := fmt.Sprintf(`apiVersion: kustomize.config.k8s.io/v1beta1
kind: Kustomization
resources:
  - %s
patches:
  - path: run-paths.yaml
`, overlay)
	files := map[string]string{"kustomization.yaml": kustomization, "run-paths.yaml": patch}
	capsPatch, err := runtimeCapabilitiesPatch(repoRoot)
	if err != nil {
		return nil, err
	}
	if capsPatch != "" {
		files["capabilities.yaml"] = capsPatch
		files["kustomization.yaml"] += "  - path: capabilities.yaml\n"
	}
	if config != "" {
		cm := map[string]any{
			"apiVersion": "v1",
			"kind":       "ConfigMap",
			"metadata":   map[string]any{"name": EvictiondConfigMap, "namespace": EvictiondNamespace},
			"data":       map[string]string{"config.yaml": config},
		}
		data, err := yaml.Marshal(cm)
		if err != nil {
			return nil, fmt.Errorf("encoding the config patch: %w", err)
		}
		files["config.yaml"] = string(data)
		files["kustomization.yaml"] += "  - path: config.yaml\n"
	}
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			return nil, fmt.Errorf("writing %s: %w", name, err)
		}
	}
	resMap, err := krusty.MakeKustomizer(krusty.MakeDefaultOptions()).Run(filesys.MakeFsOnDisk(), dir)
	if err != nil {
		return nil, fmt.Errorf("kustomize build %s (overlay test/e2e/overlay over deploy/): %w", dir, err)
	}
	out, err := resMap.AsYaml()
	if err != nil {
		return nil, fmt.Errorf("rendering the overlay: %w", err)
	}
	return out, nil
}

// Apply server-side-applies every object of a multi-document YAML stream, in order
// (Namespaces first is the author's job, as with kubectl apply).
func (c *Cluster) Apply(ctx context.Context, manifests []byte) error {
	dyn, err := dynamic.NewForConfig(c.Config)
	if err != nil {
		return fmt.Errorf("building a dynamic client: %w", err)
	}
	disco, err := discovery.NewDiscoveryClientForConfig(c.Config)
	if err != nil {
		return fmt.Errorf("building a discovery client: %w", err)
	}
	mapper := restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(disco))
	for _, doc := range bytes.Split(manifests, []byte("\n---\n")) {
		if len(bytes.TrimSpace(doc)) == 0 {
			continue
		}
		obj := &unstructured.Unstructured{}
		if err := yaml.Unmarshal(doc, &obj.Object); err != nil {
			return fmt.Errorf("decoding manifest: %w\n%s", err, doc)
		}
		gvk := obj.GroupVersionKind()
		mapping, err := mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
		if err != nil {
			return fmt.Errorf("%s %s: %w", gvk, obj.GetName(), err)
		}
		var ri dynamic.ResourceInterface = dyn.Resource(mapping.Resource)
		if mapping.Scope.Name() == meta.RESTScopeNameNamespace {
			ri = dyn.Resource(mapping.Resource).Namespace(obj.GetNamespace())
		}
		if _, err := ri.Apply(ctx, obj.GetName(), obj, metav1.ApplyOptions{FieldManager: fieldManager, Force: true}); err != nil {
			return fmt.Errorf("applying %s %s/%s: %w", gvk.Kind, obj.GetNamespace(), obj.GetName(), err)
		}
	}
	return nil
}

// WaitEvictiondReady waits until the DaemonSet has its pod on the node, Ready, and returns it.
func (c *Cluster) WaitEvictiondReady(ctx context.Context, timeout time.Duration) (*corev1.Pod, error) {
	var ready *corev1.Pod
	var last string
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		ds, err := c.Client.AppsV1().DaemonSets(EvictiondNamespace).Get(ctx, EvictiondDaemonSet, metav1.GetOptions{})
		if err != nil {
			last = err.Error()
			return false, nil
		}
		pod, err := c.EvictiondPod(ctx)
		if err != nil {
			last = fmt.Sprintf("daemonset status %+v; %v", ds.Status, err)
			return false, nil
		}
		last = fmt.Sprintf("daemonset status %+v; pod %s phase %s", ds.Status, pod.Name, pod.Status.Phase)
		for _, cs := range pod.Status.ContainerStatuses {
			if w := cs.State.Waiting; w != nil {
				last += fmt.Sprintf("; container %s waiting: %s: %s", cs.Name, w.Reason, w.Message)
			}
			if lt := cs.LastTerminationState.Terminated; lt != nil {
				last += fmt.Sprintf("; container %s last exit %d (%s), restarts %d", cs.Name, lt.ExitCode, lt.Reason, cs.RestartCount)
			}
		}
		if dsReady(ds) && podIsReady(pod) {
			ready = pod
			return true, nil
		}
		return false, nil
	})
	if err != nil {
		return nil, fmt.Errorf("evictiond DaemonSet not ready after %s: %w (last seen: %s)\n--- evictiond log ---\n%s\n--- kubelet log ---\n%s",
			timeout, err, last, c.EvictiondLogTail(40), c.LogTail("kubelet", 20))
	}
	return ready, nil
}

func dsReady(ds *appsv1.DaemonSet) bool {
	return ds.Status.DesiredNumberScheduled > 0 && ds.Status.NumberReady == ds.Status.DesiredNumberScheduled &&
		ds.Status.UpdatedNumberScheduled == ds.Status.DesiredNumberScheduled
}

func podIsReady(pod *corev1.Pod) bool {
	for _, cond := range pod.Status.Conditions {
		if cond.Type == corev1.PodReady {
			return cond.Status == corev1.ConditionTrue
		}
	}
	return false
}

// EvictiondPod returns the newest running (not terminating) evictiond pod on the node.
func (c *Cluster) EvictiondPod(ctx context.Context) (*corev1.Pod, error) {
	pods, err := c.Client.CoreV1().Pods(EvictiondNamespace).List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/name=evictiond"})
	if err != nil {
		return nil, fmt.Errorf("listing evictiond pods: %w", err)
	}
	var newest *corev1.Pod
	for i := range pods.Items {
		p := &pods.Items[i]
		if p.DeletionTimestamp != nil || p.Spec.NodeName != NodeName {
			continue
		}
		if newest == nil || p.CreationTimestamp.After(newest.CreationTimestamp.Time) {
			newest = p
		}
	}
	if newest == nil {
		return nil, errors.New("no evictiond pod on the node yet")
	}
	return newest, nil
}

// EvictiondLogPath returns the log file of the current evictiond container, read from the
// kubelet's pod logs directory (the kubelet's log API is not exposed by this node).
func (c *Cluster) EvictiondLogPath(ctx context.Context) (string, error) {
	pod, err := c.EvictiondPod(ctx)
	if err != nil {
		return "", err
	}
	dir := filepath.Join(c.PodLogsDir, fmt.Sprintf("%s_%s_%s", pod.Namespace, pod.Name, pod.UID), "evictiond")
	logs, err := filepath.Glob(filepath.Join(dir, "*.log"))
	if err != nil || len(logs) == 0 {
		return "", fmt.Errorf("no container log in %s", dir)
	}
	// The highest restart number is the current container.
	newest := logs[0]
	for _, l := range logs[1:] {
		if restartNumber(l) > restartNumber(newest) {
			newest = l
		}
	}
	return newest, nil
}

func restartNumber(logPath string) int {
	n, _ := strconv.Atoi(strings.TrimSuffix(filepath.Base(logPath), ".log"))
	return n
}

// EvictiondLogTail returns the last n lines of evictiond's container log, or why not.
func (c *Cluster) EvictiondLogTail(n int) string {
	path, err := c.EvictiondLogPath(context.Background())
	if err != nil {
		return fmt.Sprintf("(no evictiond log: %v)", err)
	}
	return proc.Tail(path, n)
}

// runtimeCapabilities returns deploy/'s added capabilities without those this machine's
// container runtime does not hold, and whether any was left out (then the agent runs with
// exactly the shipped securityContext otherwise). runc cannot give a container a capability
// outside its own bounding set ("unable to apply caps: operation not permitted"): on a
// machine whose root lacks CAP_SYS_RESOURCE (as this project's test machines do) the agent
// could not start at all. Without CAP_SYS_RESOURCE its PSI triggers fall back to 2 s windows
// (internal/notify), which the scenarios do not depend on.
func runtimeCapabilities(repoRoot string) ([]corev1.Capability, bool, error) {
	data, err := os.ReadFile(filepath.Join(repoRoot, "deploy", "daemonset.yaml"))
	if err != nil {
		return nil, false, fmt.Errorf("reading deploy/daemonset.yaml: %w", err)
	}
	var ds appsv1.DaemonSet
	if err := yaml.Unmarshal(data, &ds); err != nil {
		return nil, false, fmt.Errorf("decoding deploy/daemonset.yaml: %w", err)
	}
	var shipped []corev1.Capability
	for _, c := range ds.Spec.Template.Spec.Containers {
		if c.Name == "evictiond" && c.SecurityContext != nil && c.SecurityContext.Capabilities != nil {
			shipped = c.SecurityContext.Capabilities.Add
		}
	}
	bounding, err := boundingCapabilities()
	if err != nil {
		return nil, false, err
	}
	keep := []corev1.Capability{}
	for _, c := range shipped {
		if bit, ok := capabilityBits[c]; !ok || bounding&(1<<bit) != 0 {
			keep = append(keep, c)
		}
	}
	return keep, len(keep) != len(shipped), nil
}

// runtimeCapabilitiesPatch is runtimeCapabilities as a patch of deploy/'s DaemonSet, or ""
// when nothing is left out.
func runtimeCapabilitiesPatch(repoRoot string) (string, error) {
	keep, reduced, err := runtimeCapabilities(repoRoot)
	if err != nil || !reduced {
		return "", err
	}
	patch := map[string]any{
		"apiVersion": "apps/v1", "kind": "DaemonSet",
		"metadata": map[string]any{"name": EvictiondDaemonSet, "namespace": EvictiondNamespace},
		"spec": map[string]any{"template": map[string]any{"spec": map[string]any{"containers": []any{map[string]any{
			"name": "evictiond", "securityContext": map[string]any{"capabilities": map[string]any{"add": keep}},
		}}}}},
	}
	out, err := yaml.Marshal(patch)
	if err != nil {
		return "", fmt.Errorf("encoding the capabilities patch: %w", err)
	}
	return string(out), nil
}

// capabilityBits are the capabilities deploy/ adds, by their bit in /proc/<pid>/status.
var capabilityBits = map[corev1.Capability]uint{"KILL": unix.CAP_KILL, "DAC_READ_SEARCH": unix.CAP_DAC_READ_SEARCH, "SYS_RESOURCE": unix.CAP_SYS_RESOURCE}

// boundingCapabilities is this process's capability bounding set; the test runs as the
// root that starts containerd, so the runtime's is the same.
func boundingCapabilities() (uint64, error) {
	data, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(data), "\n") {
		if v, ok := strings.CutPrefix(line, "CapBnd:"); ok {
			return strconv.ParseUint(strings.TrimSpace(v), 16, 64)
		}
	}
	return 0, errors.New("/proc/self/status has no CapBnd line")
}

// extraArgLines are args as items of the patch's args list.
func extraArgLines(args []string) string {
	var b strings.Builder
	for _, a := range args {
		fmt.Fprintf(&b, "            - %q\n", a)
	}
	return b.String()
}

// StateDir is the host directory mounted as evictiond's state directory
// (/var/lib/evictiond in its pod).
func (c *Cluster) StateDir() string { return filepath.Join(c.Dir, "evictiond-state") }
