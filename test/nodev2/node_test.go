//go:build nodev2

package nodev2

import (
	"context"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	kubeletv1beta1 "k8s.io/kubelet/config/v1beta1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"

	"github.com/evictiond/evictiond/internal/testenv/apiserver"
	"github.com/evictiond/evictiond/internal/testenv/images"
	"github.com/evictiond/evictiond/internal/testenv/vm"
)

// moduleRoot is where builds run from (this package is test/nodev2).
const moduleRoot = "../.."

// nodeName is the Node the VM's kubelet registers.
const nodeName = "evictiond-v2"

// Environment the make target sets (mk/nodev2.mk).
const (
	rootfsEnv     = "EVICTIOND_NODE_ROOTFS"    // hack/node-v2-rootfs.sh's tar
	containerdEnv = "EVICTIOND_CONTAINERD_BIN" // hack/containerd.sh's directory
	helmEnv       = "EVICTIOND_HELM"           // helm binary
	imageTarEnv   = "EVICTIOND_IMAGE_TAR"      // evictiond's image (else make image)
	keepEnv       = "EVICTIOND_NODE_KEEP"      // keep the VM's directory
)

// Guest paths.
const (
	guestImages  = "/var/images"
	guestKubelet = "/etc/kubernetes/kubelet.yaml"
	guestKubecfg = "/etc/kubernetes/kubelet.kubeconfig"
	guestStatic  = "/etc/kubernetes/manifests"
	// guestMemoryMiB is the VM's memory; the kubelet reserves guestReservedMiB of it for the
	// system (the tmpfs root, containerd, the kubelet), so kubepods gets a real limit.
	guestMemoryMiB   = 4096
	guestReservedMiB = 1024
	// guestDiskBytes is the node's disk (/var/lib/kubelet and /var/lib/containerd: nodefs and
	// imagefs on one filesystem, as on most nodes).
	guestDiskBytes = 4 << 30
)

// workloads are the test/e2e/workloads programs, one image each.
var workloads = []string{"idle", "memhog", "pidhog", "diskfill"}

func workloadImage(name string) string { return "e2e.evictiond.io/" + name + ":dev" }

// node is the running cgroup v2 node: the VM with containerd 2.x and the kubelet, registered
// with a control plane on this machine.
type node struct {
	vm     *vm.Node
	api    *apiserver.Env
	client kubernetes.Interface
	helm   string
	dir    string
	// boot: qemu start → probe, → Node Ready, → first pod (the static pod) running.
	probeUp, nodeReady, firstPod time.Duration
}

// startNode boots the node and waits until its Node is Ready and its static pod runs. It
// fails the test (never skips) when a component is missing, naming the make target that
// provides it.
func startNode(t *testing.T) *node {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Fatal("the cgroup v2 node tier runs qemu and a control plane as root: run `make test-node-v2` as root")
	}
	need := map[string]string{}
	for env, target := range map[string]string{rootfsEnv: "hack/node-v2-rootfs.sh", containerdEnv: "hack/containerd.sh", helmEnv: "make helm", vm.KernelEnv: "hack/vm-kernel.sh"} {
		v := os.Getenv(env)
		if v == "" {
			t.Fatalf("%s is not set (make test-node-v2 sets it from %s)", env, target)
		}
		if _, err := os.Stat(v); err != nil {
			t.Fatalf("%s=%s: %v (built by %s)", env, v, err, target)
		}
		need[env] = v
	}
	kubelet := filepath.Join(apiserver.DefaultBinDir(), "kubelet")
	if _, err := os.Stat(kubelet); err != nil {
		t.Fatalf("kubelet %s not found: build it with `make k8s-binaries`: %v", apiserver.K8sVersion, err)
	}
	dir, err := os.MkdirTemp("", "evictiond-node-v2-")
	if err != nil {
		t.Fatal(err)
	}
	n := &node{dir: dir, helm: need[helmEnv]}
	t.Cleanup(func() {
		if t.Failed() || os.Getenv(keepEnv) != "" {
			t.Logf("the node's files (console.log, initramfs, disk) are kept in %s", dir)
			return
		}
		_ = os.RemoveAll(dir)
	})

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	// The control plane starts while the images are built.
	type apiResult struct {
		env *apiserver.Env
		err error
	}
	apiDone := make(chan apiResult, 1)
	go func() {
		env, err := apiserver.Start(apiserver.Options{Scheduler: true, NodeControllers: true, StartTimeout: 3 * time.Minute})
		apiDone <- apiResult{env, err}
	}()
	files, err := guestImageFiles(ctx, filepath.Join(dir, "images"))
	r := <-apiDone
	if r.err != nil {
		t.Fatalf("starting the control plane: %v", r.err)
	}
	n.api, n.client = r.env, r.env.Client
	t.Cleanup(n.api.Stop)
	if err != nil {
		t.Fatal(err)
	}
	probe, err := vm.BuildProbe(ctx, moduleRoot, dir)
	if err != nil {
		t.Fatal(err)
	}
	node, err := n.guestFiles(need[containerdEnv], kubelet)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range node {
		files[k] = v
	}
	n.vm, err = vm.StartNode(ctx, vm.NodeOptions{
		Kernel: need[vm.KernelEnv], RootFS: need[rootfsEnv], Files: files, Probe: probe,
		MemoryMiB: guestMemoryMiB, CPUs: 2, DiskBytes: guestDiskBytes, Dir: dir,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			n.dumpGuest(t)
		}
		if err := n.vm.Stop(time.Minute); err != nil {
			t.Log(err)
		}
	})
	n.probeUp = n.vm.ProbeUp
	if err := n.waitReady(ctx); err != nil {
		t.Fatalf("%v\n%s", err, n.guestTail(ctx))
	}
	t.Logf("cgroup v2 node up: probe %v, Node Ready %v, first pod running %v after qemu started",
		n.probeUp.Round(100*time.Millisecond), n.nodeReady.Round(100*time.Millisecond), n.firstPod.Round(100*time.Millisecond))
	return n
}

// guestImageFiles builds the images the node runs (the sandbox image, the workloads,
// evictiond's) as docker archives for the guest to import at boot.
func guestImageFiles(ctx context.Context, dir string) (map[string]vm.File, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	args := []string{"build", "-trimpath", "-ldflags=-s -w", "-o", dir + "/"}
	for _, w := range workloads {
		args = append(args, "./test/e2e/workloads/"+w)
	}
	build := exec.CommandContext(ctx, "go", args...)
	build.Dir = moduleRoot
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("building the workloads: %w: %s", err, out)
	}
	pause, err := images.Pause()
	if err != nil {
		return nil, err
	}
	specs := []images.Spec{pause}
	for _, w := range workloads {
		data, err := os.ReadFile(filepath.Join(dir, w))
		if err != nil {
			return nil, err
		}
		specs = append(specs, images.Spec{Ref: workloadImage(w), Files: []images.File{{Path: "/" + w, Data: data, Mode: 0o755}}, Entrypoint: []string{"/" + w}})
	}
	files := map[string]vm.File{}
	for i, s := range specs {
		out := filepath.Join(dir, fmt.Sprintf("image-%d.tar", i))
		if _, err := images.WriteDockerArchiveFile(out, s); err != nil {
			return nil, fmt.Errorf("image %s: %w", s.Ref, err)
		}
		files[fmt.Sprintf("%s/image-%d.tar", guestImages, i)] = vm.File{Source: out, Mode: 0o644}
	}
	archive := os.Getenv(imageTarEnv)
	if archive == "" {
		cmd := exec.CommandContext(ctx, "make", "--no-print-directory", "image", "IMAGE_PLATFORMS=linux/"+runtime.GOARCH)
		cmd.Dir = moduleRoot
		if out, err := cmd.CombinedOutput(); err != nil {
			return nil, fmt.Errorf("make image: %w: %s", err, out)
		}
		archive = filepath.Join(moduleRoot, "bin", "evictiond-image.tar")
	}
	// evictiond's binary as well, to run `evictiond observe` on the node itself.
	bin := filepath.Join(dir, "evictiond")
	build = exec.CommandContext(ctx, "go", "build", "-trimpath", "-ldflags=-s -w", "-o", bin, "./cmd/evictiond")
	build.Dir = moduleRoot
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("building evictiond: %w: %s", err, out)
	}
	files["/usr/local/bin/evictiond"] = vm.File{Source: bin}
	files[guestImages+"/evictiond.tar"] = vm.File{Source: archive, Mode: 0o644}
	// The idle program, for images the disk scenario builds in the guest.
	files["/usr/local/share/idle"] = vm.File{Source: filepath.Join(dir, "idle")}
	return files, nil
}

// guestFiles are the node's own files: containerd 2.x and the kubelet with their
// configuration and units, the CNI bridge, the disk and network setup, the kubelet's
// kubeconfig for the control plane on this machine (reached as 10.0.2.2 through qemu's user
// network), and the API server's Service address routed there for pods (no kube-proxy).
func (n *node) guestFiles(containerdBin, kubelet string) (map[string]vm.File, error) {
	apiURL, err := url.Parse(n.api.Config.Host)
	if err != nil {
		return nil, err
	}
	apiPort := apiURL.Port()
	kc := clientcmdapi.NewConfig()
	kc.Clusters["host"] = &clientcmdapi.Cluster{Server: "https://" + net.JoinHostPort(vm.HostAddr, apiPort),
		CertificateAuthorityData: n.api.CACertPEM, TLSServerName: "localhost"}
	kc.AuthInfos["kubelet"] = &clientcmdapi.AuthInfo{Token: n.api.Config.BearerToken}
	kc.Contexts["host"] = &clientcmdapi.Context{Cluster: "host", AuthInfo: "kubelet"}
	kc.CurrentContext = "host"
	kubeconfig, err := clientcmd.Write(*kc)
	if err != nil {
		return nil, err
	}
	kubeletConfig, err := yaml.Marshal(kubeletConfiguration())
	if err != nil {
		return nil, err
	}
	unit := func(name, body string, wantedBy string) map[string]vm.File {
		return map[string]vm.File{
			"/etc/systemd/system/" + name:                        {Data: []byte(body)},
			"/etc/systemd/system/" + wantedBy + ".wants/" + name: {Link: "/etc/systemd/system/" + name},
		}
	}
	files := map[string]vm.File{
		"/usr/local/bin/containerd":              {Source: filepath.Join(containerdBin, "containerd")},
		"/usr/local/bin/containerd-shim-runc-v2": {Source: filepath.Join(containerdBin, "containerd-shim-runc-v2")},
		"/usr/local/bin/ctr":                     {Source: filepath.Join(containerdBin, "ctr")},
		"/usr/local/bin/kubelet":                 {Source: kubelet},
		"/usr/local/sbin/node-setup":             {Data: []byte(fmt.Sprintf(nodeSetup, apiPort)), Mode: 0o755},
		"/etc/containerd/config.toml":            {Data: []byte(fmt.Sprintf(containerdConfig, images.PauseRef))},
		"/etc/cni/net.d/10-bridge.conflist":      {Data: []byte(cniConfig)},
		guestKubelet:                             {Data: kubeletConfig},
		guestKubecfg:                             {Data: kubeconfig, Mode: 0o600},
		guestStatic + "/static-idle.yaml":        {Data: []byte(staticPod)},
		"/etc/hostname":                          {Data: []byte(nodeName + "\n")},
		"/etc/hosts":                             {Data: []byte("127.0.0.1 localhost\n10.0.2.15 " + nodeName + "\n")},
		"/etc/resolv.conf":                       {Data: []byte("nameserver 10.0.2.3\n")},
		"/etc/machine-id":                        {Data: []byte("e7d1c7e5a0b54f4f9b8e2f0c5d6a7b8c\n")},
	}
	// What a short boot does without: logins on the consoles, waiting for an online network.
	for _, masked := range []string{"serial-getty@ttyS0.service", "getty@tty1.service", "systemd-networkd-wait-online.service",
		"apt-daily.timer", "apt-daily-upgrade.timer", "e2scrub_all.timer", "fstrim.timer", "dpkg-db-backup.timer"} {
		files["/etc/systemd/system/"+masked] = vm.File{Link: "/dev/null"}
	}
	for _, u := range []map[string]vm.File{
		unit("node-setup.service", nodeSetupUnit, "sysinit.target"),
		unit("containerd.service", containerdUnit, "multi-user.target"),
		unit("node-images.service", imagesUnit, "multi-user.target"),
		unit("kubelet.service", kubeletUnit, "multi-user.target"),
	} {
		for k, v := range u {
			files[k] = v
		}
	}
	return files, nil
}

// kubeletConfiguration is the node's kubelet: the systemd cgroup driver, containerd 2.x's
// CRI, kubepods limited to the VM's memory less guestReservedMiB, the kubelet's own eviction
// as a backstop below evictiond's thresholds, a static pod directory.
func kubeletConfiguration() kubeletv1beta1.KubeletConfiguration {
	return kubeletv1beta1.KubeletConfiguration{
		TypeMeta:                 metav1.TypeMeta{APIVersion: "kubelet.config.k8s.io/v1beta1", Kind: "KubeletConfiguration"},
		CgroupDriver:             "systemd",
		ContainerRuntimeEndpoint: "unix:///run/containerd/containerd.sock",
		FailSwapOn:               ptr.To(false),
		StaticPodPath:            guestStatic,
		Authentication: kubeletv1beta1.KubeletAuthentication{
			Anonymous: kubeletv1beta1.KubeletAnonymousAuthentication{Enabled: ptr.To(false)},
			Webhook:   kubeletv1beta1.KubeletWebhookAuthentication{Enabled: ptr.To(true)},
		},
		Authorization:          kubeletv1beta1.KubeletAuthorization{Mode: kubeletv1beta1.KubeletAuthorizationModeWebhook},
		SystemReserved:         map[string]string{"memory": strconv.Itoa(guestReservedMiB) + "Mi"},
		EnforceNodeAllocatable: []string{"pods"},
		EvictionHard: map[string]string{
			"memory.available": "100Mi", "nodefs.available": "1%", "nodefs.inodesFree": "1%",
			"imagefs.available": "1%", "imagefs.inodesFree": "1%",
		},
		EvictionPressureTransitionPeriod: metav1.Duration{Duration: 30 * time.Second},
		// No periodic image GC: the disk scenario proves evictiond's, through the CRI.
		ImageGCHighThresholdPercent: ptr.To(int32(100)),
		SyncFrequency:               metav1.Duration{Duration: 10 * time.Second},
		ResolverConfig:              ptr.To("/etc/resolv.conf"),
		MakeIPTablesUtilChains:      ptr.To(false),
	}
}

// nodeSetup prepares what the units need: modules, sysctls, the network (qemu's user
// network: the guest is 10.0.2.15, the host 10.0.2.2), the disk at /var/lib/kubelet and
// /var/lib/containerd, and the API server's Service address (10.0.0.1:443) routed to the
// host's API server: the part of kube-proxy a hostNetwork pod needs. %s: the API port.
const nodeSetup = `#!/bin/sh
set -eu
modprobe -a overlay bridge br_netfilter veth e1000 virtio_pci virtio_blk ext4 nf_tables nft_chain_nat nf_nat
sysctl -qw net.ipv4.ip_forward=1 net.bridge.bridge-nf-call-iptables=1
ip link set lo up
ip link set eth0 up
ip addr add 10.0.2.15/24 dev eth0
ip route add default via 10.0.2.2
for i in $(seq 100); do [ -b /dev/vda ] && break; sleep 0.1; done
mkdir -p /mnt/node
mount -t ext4 /dev/vda /mnt/node
for d in kubelet containerd; do
	mkdir -p /mnt/node/$d /var/lib/$d
	mount --bind /mnt/node/$d /var/lib/$d
done
nft -f - <<EOF
table ip evictiond-node-v2 {
	chain output {
		type nat hook output priority -100; policy accept;
		ip daddr 10.0.0.1 tcp dport 443 dnat to 10.0.2.2:%s
	}
}
EOF
`

const nodeSetupUnit = `[Unit]
Description=node setup (modules, network, disk, the API server's Service address)
DefaultDependencies=no
After=systemd-modules-load.service local-fs.target
Before=sysinit.target vmprobe.service
[Service]
Type=oneshot
RemainAfterExit=yes
ExecStart=/usr/local/sbin/node-setup
`

const containerdUnit = `[Unit]
Description=containerd
After=node-setup.service
[Service]
ExecStart=/usr/local/bin/containerd
Type=notify
Delegate=yes
KillMode=process
Restart=always
LimitNOFILE=infinity
OOMScoreAdjust=-999
[Install]
WantedBy=multi-user.target
`

const imagesUnit = `[Unit]
Description=import the test images (no registry)
After=containerd.service
Requires=containerd.service
Before=kubelet.service
[Service]
Type=oneshot
RemainAfterExit=yes
ExecStart=/bin/sh -c 'for i in /var/images/*.tar; do /usr/local/bin/ctr -n k8s.io images import --no-unpack=false "$i" || exit 1; done'
`

const kubeletUnit = `[Unit]
Description=kubelet
After=containerd.service node-images.service
Wants=containerd.service
[Service]
ExecStart=/usr/local/bin/kubelet --config=/etc/kubernetes/kubelet.yaml --kubeconfig=/etc/kubernetes/kubelet.kubeconfig --hostname-override=evictiond-v2 --node-ip=10.0.2.15 --v=2
Restart=always
RestartSec=1
[Install]
WantedBy=multi-user.target
`

const containerdConfig = `version = 3
root = "/var/lib/containerd"
state = "/run/containerd"
[grpc]
  address = "/run/containerd/containerd.sock"
[plugins.'io.containerd.cri.v1.images']
  snapshotter = "overlayfs"
  [plugins.'io.containerd.cri.v1.images'.pinned_images]
    sandbox = "%s"
[plugins.'io.containerd.cri.v1.runtime']
  [plugins.'io.containerd.cri.v1.runtime'.containerd]
    default_runtime_name = "runc"
    [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc.options]
        SystemdCgroup = true
        # The root is an initramfs, which pivot_root cannot leave (EINVAL): runc moves the
        # container's root over / and chroots instead. Nothing the tests observe depends on it.
        NoPivotRoot = true
  [plugins.'io.containerd.cri.v1.runtime'.cni]
    bin_dirs = ["/usr/lib/cni"]
    conf_dir = "/etc/cni/net.d"
`

const cniConfig = `{
  "cniVersion": "1.0.0",
  "name": "node-v2",
  "plugins": [
    {"type": "bridge", "bridge": "cni0", "isGateway": true, "ipMasq": true,
     "ipam": {"type": "host-local", "ranges": [[{"subnet": "10.244.0.0/24"}]], "routes": [{"dst": "0.0.0.0/0"}]}},
    {"type": "loopback"}
  ]
}
`

// staticPod is a pod from the kubelet's manifest directory: its UID is a 32-character hash,
// not a 36-character UUID, and evictiond must list it as it lists API pods.
const staticPod = `apiVersion: v1
kind: Pod
metadata:
  name: static-idle
  namespace: default
spec:
  containers:
  - name: idle
    image: e2e.evictiond.io/idle:dev
    imagePullPolicy: Never
    resources:
      requests: {memory: 16Mi, cpu: 10m}
      limits: {memory: 64Mi}
`

// waitReady waits until the Node is Ready (its not-ready taint lifted) and the static pod's
// mirror pod is Running.
func (n *node) waitReady(ctx context.Context) error {
	var last string
	err := wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, 5*time.Minute, true, func(ctx context.Context) (bool, error) {
		if n.nodeReady == 0 {
			no, err := n.client.CoreV1().Nodes().Get(ctx, nodeName, metav1.GetOptions{})
			if err != nil {
				last = err.Error()
				return false, nil
			}
			for _, c := range no.Status.Conditions {
				if c.Type == corev1.NodeReady {
					last = fmt.Sprintf("Node Ready=%s (%s: %s)", c.Status, c.Reason, c.Message)
					if c.Status == corev1.ConditionTrue {
						n.nodeReady = time.Since(n.vm.Started)
					}
				}
			}
			if n.nodeReady == 0 {
				return false, nil
			}
		}
		pod, err := n.client.CoreV1().Pods("default").Get(ctx, "static-idle-"+nodeName, metav1.GetOptions{})
		if err != nil {
			last = "static pod's mirror: " + err.Error()
			return false, nil
		}
		last = "static pod: " + string(pod.Status.Phase)
		if pod.Status.Phase == corev1.PodRunning {
			n.firstPod = time.Since(n.vm.Started)
			return true, nil
		}
		return false, nil
	})
	if err != nil {
		return fmt.Errorf("waiting for node %s to be Ready with its static pod running: %v (last: %s)", nodeName, err, last)
	}
	return nil
}

// guestTail is the guest's units' status and the last journal lines, for failures.
func (n *node) guestTail(ctx context.Context) string {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	out, err := n.vm.Sh(ctx, "systemctl --no-pager --failed; journalctl --no-pager -q -n 60 -u node-setup -u containerd -u node-images -u kubelet")
	if err != nil {
		out += "\n(" + err.Error() + ")"
	}
	return "--- guest ---\n" + out + "\n" + n.vm.ConsoleTail(20)
}

// dumpGuest writes the guest's journal into the node's directory.
func (n *node) dumpGuest(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	out, err := n.vm.Sh(ctx, "journalctl --no-pager -q -o short-monotonic; echo; find /var/log/pods -name '*.log' | while read f; do echo \"== $f\"; tail -n 200 \"$f\"; done")
	if err != nil {
		t.Logf("reading the guest's journal: %v", err)
	}
	path := filepath.Join(n.dir, "journal.log")
	if err := os.WriteFile(path, []byte(out), 0o644); err == nil {
		t.Logf("the guest's journal and pod logs: %s", path)
	}
}

// sh runs a script in the guest and fails the test on error.
func (n *node) sh(t *testing.T, script string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	out, err := n.vm.Sh(ctx, script)
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(out)
}
