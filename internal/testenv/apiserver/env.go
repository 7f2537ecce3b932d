// Package apiserver runs a real control plane for integration tests: etcd (Debian's
// etcd-server), kube-apiserver and kube-controller-manager (built by
// hack/k8s-binaries.sh). The controller manager runs the controllers evictiond's
// behaviour depends on: disruption (PDB status), service accounts and their tokens,
// the kube-root-ca.crt publisher, garbage collection and namespace deletion.
//
// Typical use, one environment per test package:
//
//	var env *apiserver.Env
//
//	func TestMain(m *testing.M) {
//		var err error
//		env, err = apiserver.Start(apiserver.Options{AuditLog: true})
//		if err != nil {
//			fmt.Fprintln(os.Stderr, err)
//			os.Exit(1)
//		}
//		code := m.Run()
//		env.Stop()
//		os.Exit(code)
//	}
package apiserver

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/evictiond/evictiond/internal/testenv/proc"
)

// K8sVersion is the Kubernetes release whose binaries the environment runs.
const K8sVersion = "v1.35.4"

// adminToken authenticates the environment's admin client (group system:masters)
// through --token-auth-file; it only ever exists on loopback in a temp dir.
const adminToken = "evictiond-testenv-admin"

// Options configures Start. The zero value is usable.
type Options struct {
	// BinDir holds kube-apiserver and kube-controller-manager. Default: $EVICTIOND_K8S_BIN,
	// else ${EVICTIOND_CACHE:-/var/cache/evictiond}/k8s/<K8sVersion>/bin.
	BinDir string
	// EtcdPath is the etcd binary. Default: "etcd" from $PATH (Debian package etcd-server).
	EtcdPath string
	// AuditLog enables the apiserver's audit log at Metadata level (see Env.AuditLogPath).
	AuditLog bool
	// StartTimeout bounds each component's start. Default 90 s (the machine is shared).
	StartTimeout time.Duration
	// KeepDir keeps the working directory (logs, certs, etcd data) after Stop.
	KeepDir bool
	// Scheduler also runs kube-scheduler (needed when pods are to be scheduled, e.g. a
	// DaemonSet's pods onto a real kubelet's node).
	Scheduler bool
	// NodeControllers also runs the controllers a cluster with a real node needs: DaemonSet,
	// Deployment and ReplicaSet (a chart's pods), node lifecycle (lifts the not-ready taint
	// a kubelet registers its Node with) and pod GC.
	NodeControllers bool
	// ExtraAPIServerArgs are appended to kube-apiserver's flags (later flags win).
	ExtraAPIServerArgs []string
}

// Env is a running control plane. Its methods are safe to call from one test goroutine
// at a time (StopAPIServer/StartAPIServer are not meant to race with each other).
type Env struct {
	// Dir is the working directory: certificates, kubeconfig, component logs.
	Dir string
	// Config is an admin (system:masters) client configuration.
	Config *rest.Config
	// Client is a clientset built from Config.
	Client kubernetes.Interface
	// KubeconfigPath is an admin kubeconfig file for tools such as kubectl.
	KubeconfigPath string
	// AuditLogPath is the audit log (JSON lines, one audit.k8s.io/v1 Event each) when
	// Options.AuditLog is set, else empty.
	AuditLogPath string
	// CACertPEM is the CA that signed the apiserver's serving certificate.
	CACertPEM []byte

	opts      Options
	etcd      *proc.Process
	apiserver *proc.Process
	kcm       *proc.Process
	scheduler *proc.Process
	probes    int
}

// Start runs etcd, kube-apiserver and kube-controller-manager and waits until the API is
// ready and the controllers have created the default ServiceAccount. On error everything
// started is stopped and the error carries the failing component's log tail.
func Start(opts Options) (*Env, error) {
	if opts.StartTimeout == 0 {
		opts.StartTimeout = 90 * time.Second
	}
	binDir := opts.BinDir
	if binDir == "" {
		binDir = DefaultBinDir()
	}
	etcdPath := opts.EtcdPath
	if etcdPath == "" {
		etcdPath = "etcd"
	}
	resolvedEtcd, err := lookPath(etcdPath, "install the Debian package etcd-server (make etcd-package, or hack/install-deps.sh etcd-server)")
	if err != nil {
		return nil, err
	}
	bins := map[string]string{}
	components := []string{"kube-apiserver", "kube-controller-manager"}
	if opts.Scheduler {
		components = append(components, "kube-scheduler")
	}
	for _, name := range components {
		path := filepath.Join(binDir, name)
		if _, err := os.Stat(path); err != nil {
			return nil, fmt.Errorf("%s %s not found in %s (set EVICTIOND_K8S_BIN, or build it with `make k8s-binaries` / hack/k8s-binaries.sh): %w", name, K8sVersion, binDir, err)
		}
		bins[name] = path
	}

	dir, err := os.MkdirTemp("", "evictiond-apiserver-")
	if err != nil {
		return nil, fmt.Errorf("creating environment dir: %w", err)
	}
	env := &Env{Dir: dir, opts: opts}
	fail := func(err error) (*Env, error) {
		env.Stop()
		return nil, err
	}

	pki, err := generatePKI(dir)
	if err != nil {
		return fail(err)
	}
	env.CACertPEM = pki.caCertPEM
	ports, err := freePorts(3)
	if err != nil {
		return fail(err)
	}
	etcdClientURL := "http://127.0.0.1:" + strconv.Itoa(ports[0])
	etcdPeerURL := "http://127.0.0.1:" + strconv.Itoa(ports[1])
	apiPort := ports[2]

	// etcd data on tmpfs when there is one: etcd 3.4 has no --unsafe-no-fsync, and fsyncs
	// on a disk shared with other builds make every write slow.
	etcdDataDir := filepath.Join(dir, "etcd")
	if shm, err := os.MkdirTemp("/dev/shm", "evictiond-etcd-"); err == nil {
		etcdDataDir = shm
	}
	env.etcd = &proc.Process{
		Name:    "etcd",
		Path:    resolvedEtcd,
		LogPath: filepath.Join(dir, "etcd.log"),
		Args: []string{
			"--name=default",
			"--data-dir=" + etcdDataDir,
			"--listen-client-urls=" + etcdClientURL,
			"--advertise-client-urls=" + etcdClientURL,
			"--listen-peer-urls=" + etcdPeerURL,
			"--initial-advertise-peer-urls=" + etcdPeerURL,
			"--initial-cluster=default=" + etcdPeerURL,
			"--logger=zap",
			"--log-level=warn",
		},
	}
	if err := env.etcd.Start(); err != nil {
		return fail(err)
	}
	if err := waitHTTP(env.etcd, etcdClientURL+"/health", opts.StartTimeout); err != nil {
		return fail(err)
	}

	tokenFile := filepath.Join(dir, "tokens.csv")
	if err := os.WriteFile(tokenFile, []byte(adminToken+",evictiond-testenv-admin,evictiond-testenv-admin,system:masters\n"), 0o600); err != nil {
		return fail(fmt.Errorf("writing token file: %w", err))
	}
	apiArgs := []string{
		"--etcd-servers=" + etcdClientURL,
		"--bind-address=127.0.0.1",
		"--advertise-address=127.0.0.1",
		"--secure-port=" + strconv.Itoa(apiPort),
		"--cert-dir=" + filepath.Join(dir, "apiserver-certs"),
		"--tls-cert-file=" + pki.servingCert,
		"--tls-private-key-file=" + pki.servingKey,
		"--client-ca-file=" + pki.caCertFile,
		"--token-auth-file=" + tokenFile,
		"--authorization-mode=Node,RBAC",
		"--service-account-issuer=https://kubernetes.default.svc.cluster.local",
		"--service-account-key-file=" + pki.saPublicKey,
		"--service-account-signing-key-file=" + pki.saPrivateKey,
		"--api-audiences=https://kubernetes.default.svc.cluster.local",
		"--service-cluster-ip-range=10.0.0.0/24",
		"--allow-privileged=true",
		"--enable-admission-plugins=NodeRestriction",
		"--profiling=false",
		"--v=1",
	}
	if opts.AuditLog {
		policyPath := filepath.Join(dir, "audit-policy.yaml")
		// Metadata for everything: enough to count and attribute writes.
		policy := "apiVersion: audit.k8s.io/v1\nkind: Policy\nomitStages: [RequestReceived]\nrules:\n- level: Metadata\n"
		if err := os.WriteFile(policyPath, []byte(policy), 0o600); err != nil {
			return fail(fmt.Errorf("writing audit policy: %w", err))
		}
		env.AuditLogPath = filepath.Join(dir, "audit.log")
		apiArgs = append(apiArgs,
			"--audit-policy-file="+policyPath,
			"--audit-log-path="+env.AuditLogPath,
			"--audit-log-mode=blocking",
			"--audit-log-format=json",
		)
	}
	env.apiserver = &proc.Process{
		Name:    "kube-apiserver",
		Path:    bins["kube-apiserver"],
		LogPath: filepath.Join(dir, "kube-apiserver.log"),
		Args:    append(apiArgs, opts.ExtraAPIServerArgs...),
	}

	env.Config = &rest.Config{
		Host:            "https://127.0.0.1:" + strconv.Itoa(apiPort),
		BearerToken:     adminToken,
		TLSClientConfig: rest.TLSClientConfig{CAData: pki.caCertPEM},
		QPS:             200,
		Burst:           400,
	}
	env.Client, err = kubernetes.NewForConfig(env.Config)
	if err != nil {
		return fail(fmt.Errorf("building admin client: %w", err))
	}
	env.KubeconfigPath = filepath.Join(dir, "admin.kubeconfig")
	if err := writeKubeconfig(env.KubeconfigPath, env.Config); err != nil {
		return fail(err)
	}
	if err := env.StartAPIServer(); err != nil {
		return fail(err)
	}

	env.kcm = &proc.Process{
		Name:    "kube-controller-manager",
		Path:    bins["kube-controller-manager"],
		LogPath: filepath.Join(dir, "kube-controller-manager.log"),
		Args: []string{
			"--kubeconfig=" + env.KubeconfigPath,
			"--controllers=" + controllers(opts),
			"--root-ca-file=" + pki.caCertFile,
			"--service-account-private-key-file=" + pki.saPrivateKey,
			"--leader-elect=false",
			"--secure-port=0",
			"--v=1",
		},
	}
	if err := env.kcm.Start(); err != nil {
		return fail(err)
	}
	if err := env.waitControllers(opts.StartTimeout); err != nil {
		return fail(err)
	}
	if opts.Scheduler {
		env.scheduler = &proc.Process{
			Name:    "kube-scheduler",
			Path:    bins["kube-scheduler"],
			LogPath: filepath.Join(dir, "kube-scheduler.log"),
			Args: []string{
				"--kubeconfig=" + env.KubeconfigPath,
				"--leader-elect=false",
				"--secure-port=0",
				"--v=1",
			},
		}
		if err := env.scheduler.Start(); err != nil {
			return fail(err)
		}
		// The scheduler has no health endpoint with --secure-port=0; a quick exit (bad
		// flags, no API access) shows within a moment.
		time.Sleep(time.Second)
		if !env.scheduler.Running() {
			return fail(env.scheduler.Failure(errors.New("exited right after start")))
		}
	}
	return env, nil
}

// DefaultBinDir is where hack/k8s-binaries.sh puts the binaries unless EVICTIOND_K8S_BIN
// says otherwise.
func DefaultBinDir() string {
	if dir := os.Getenv("EVICTIOND_K8S_BIN"); dir != "" {
		return dir
	}
	cache := os.Getenv("EVICTIOND_CACHE")
	if cache == "" {
		cache = "/var/cache/evictiond"
	}
	return filepath.Join(cache, "k8s", K8sVersion, "bin")
}

// StopAPIServer kills kube-apiserver (SIGKILL, like a crash: a graceful stop waits
// for long-running requests and takes ~15 s), leaving etcd and the controller manager
// running, so a test can observe a client's behaviour while the API is unreachable.
func (e *Env) StopAPIServer() {
	if e.apiserver != nil {
		e.apiserver.Stop(0)
	}
}

// StartAPIServer (re)starts kube-apiserver on the same address with the same state and
// waits until /readyz answers.
//
// On a restart it also restarts the controller manager, whose watches would otherwise
// reconnect with a back-off of up to 30 s (a namespace created meanwhile gets its default
// ServiceAccount late, and pods in it are refused), and waits until it works.
func (e *Env) StartAPIServer() error {
	if e.apiserver.Running() {
		return nil
	}
	if err := e.apiserver.Start(); err != nil {
		return err
	}
	if err := e.waitReady(e.opts.StartTimeout); err != nil {
		return err
	}
	if e.kcm == nil {
		return nil // first start: Start waits for the controllers itself
	}
	e.kcm.Stop(10 * time.Second)
	if err := e.kcm.Start(); err != nil {
		return err
	}
	return e.waitControllersCatchUp(e.opts.StartTimeout)
}

// waitControllersCatchUp creates a probe namespace and waits for the controller manager
// to give it its default ServiceAccount, then deletes it.
func (e *Env) waitControllersCatchUp(timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	e.probes++
	name := fmt.Sprintf("testenv-restart-probe-%d", e.probes)
	if _, err := e.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("creating probe namespace %s: %w", name, err)
	}
	err := wait.PollUntilContextCancel(ctx, 250*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		if !e.kcm.Running() {
			return false, errors.New("process exited")
		}
		_, err := e.Client.CoreV1().ServiceAccounts(name).Get(ctx, "default", metav1.GetOptions{})
		return err == nil, nil
	})
	if err != nil {
		return e.kcm.Failure(fmt.Errorf("waiting for the controllers to catch up after an API server restart: %w", err))
	}
	_ = e.Client.CoreV1().Namespaces().Delete(ctx, name, metav1.DeleteOptions{})
	return nil
}

// CreateNamespace creates a namespace and waits for the controller manager to
// give it its default ServiceAccount: the ServiceAccount admission plugin
// refuses a pod in a namespace that has none yet ("error looking up service
// account"), which the daemon tier once hit under load.
func (e *Env) CreateNamespace(ctx context.Context, name string) error {
	if _, err := e.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("creating namespace %s: %w", name, err)
	}
	ctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	err := wait.PollUntilContextCancel(ctx, 50*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		_, err := e.Client.CoreV1().ServiceAccounts(name).Get(ctx, "default", metav1.GetOptions{})
		return err == nil, nil
	})
	if err != nil {
		return fmt.Errorf("namespace %s: no default ServiceAccount within 60s: %w", name, err)
	}
	return nil
}

// Stop stops every component and removes the working directory (unless KeepDir).
func (e *Env) Stop() {
	for _, p := range []*proc.Process{e.scheduler, e.kcm, e.apiserver, e.etcd} {
		if p != nil {
			p.Stop(15 * time.Second)
		}
	}
	if e.opts.KeepDir {
		return
	}
	if e.etcd != nil {
		for _, arg := range e.etcd.Args {
			if dataDir, ok := strings.CutPrefix(arg, "--data-dir="); ok {
				_ = os.RemoveAll(dataDir)
			}
		}
	}
	_ = os.RemoveAll(e.Dir)
}

// ServiceAccountConfig returns a client configuration that authenticates as the
// ServiceAccount namespace/name with a token from the TokenRequest API. boundTo, when
// set, binds the token to that object (a Pod or a Node): a token bound to a Pod that is
// assigned to a node carries the node's name in the user's extra
// authentication.kubernetes.io/node-name, exactly like the projected token a kubelet
// mounts into a DaemonSet pod.
func (e *Env) ServiceAccountConfig(ctx context.Context, namespace, name string, boundTo *authenticationv1.BoundObjectReference) (*rest.Config, error) {
	expiry := int64(3600)
	req := &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{
			ExpirationSeconds: &expiry,
			BoundObjectRef:    boundTo,
		},
	}
	resp, err := e.Client.CoreV1().ServiceAccounts(namespace).CreateToken(ctx, name, req, metav1.CreateOptions{})
	if err != nil {
		return nil, fmt.Errorf("requesting a token for serviceaccount %s/%s: %w", namespace, name, err)
	}
	cfg := rest.AnonymousClientConfig(e.Config)
	cfg.BearerToken = resp.Status.Token
	return cfg, nil
}

// APIServerPID is kube-apiserver's process id (0 while it is stopped), for
// benchmarks that read its CPU time and memory from /proc.
func (e *Env) APIServerPID() int { return e.apiserver.Pid() }

// LogPath returns the log file of a component: "etcd", "kube-apiserver",
// "kube-controller-manager" or "kube-scheduler".
func (e *Env) LogPath(component string) string {
	return filepath.Join(e.Dir, component+".log")
}

func (e *Env) waitReady(timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	var lastErr error
	err := wait.PollUntilContextCancel(ctx, 250*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		if !e.apiserver.Running() {
			return false, errors.New("process exited")
		}
		body, err := e.Client.CoreV1().RESTClient().Get().AbsPath("/readyz").DoRaw(ctx)
		if err != nil {
			lastErr = fmt.Errorf("%w: %s", err, body)
			return false, nil
		}
		return true, nil
	})
	if err != nil {
		if lastErr != nil {
			err = fmt.Errorf("%w (last /readyz answer: %v)", err, lastErr)
		}
		return e.apiserver.Failure(fmt.Errorf("waiting for /readyz: %w", err))
	}
	return nil
}

// waitControllers waits for the signs that the controller manager works: the default
// ServiceAccount and the kube-root-ca.crt ConfigMap in namespace default.
func (e *Env) waitControllers(timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	err := wait.PollUntilContextCancel(ctx, 250*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		if !e.kcm.Running() {
			return false, errors.New("process exited")
		}
		if _, err := e.Client.CoreV1().ServiceAccounts(corev1.NamespaceDefault).Get(ctx, "default", metav1.GetOptions{}); err != nil {
			if apierrors.IsNotFound(err) {
				return false, nil
			}
			return false, nil
		}
		_, err := e.Client.CoreV1().ConfigMaps(corev1.NamespaceDefault).Get(ctx, "kube-root-ca.crt", metav1.GetOptions{})
		return err == nil, nil
	})
	if err != nil {
		return e.kcm.Failure(fmt.Errorf("waiting for the default ServiceAccount and kube-root-ca.crt: %w", err))
	}
	return nil
}

// waitHTTP polls a plain-HTTP health URL until it answers 200.
func waitHTTP(p *proc.Process, url string, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	err := wait.PollUntilContextCancel(ctx, 100*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		if !p.Running() {
			return false, errors.New("process exited")
		}
		return httpOK(ctx, url), nil
	})
	if err != nil {
		return p.Failure(fmt.Errorf("waiting for %s: %w", url, err))
	}
	return nil
}

// freePorts reserves n distinct loopback ports. The listeners are closed before the
// ports are used, a race no test on this machine has lost yet.
func freePorts(n int) ([]int, error) {
	var listeners []net.Listener
	defer func() {
		for _, l := range listeners {
			l.Close()
		}
	}()
	ports := make([]int, 0, n)
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("finding a free loopback port: %w", err)
		}
		listeners = append(listeners, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

func writeKubeconfig(path string, cfg *rest.Config) error {
	kc := clientcmdapi.NewConfig()
	kc.Clusters["testenv"] = &clientcmdapi.Cluster{Server: cfg.Host, CertificateAuthorityData: cfg.CAData}
	kc.AuthInfos["admin"] = &clientcmdapi.AuthInfo{Token: cfg.BearerToken}
	kc.Contexts["testenv"] = &clientcmdapi.Context{Cluster: "testenv", AuthInfo: "admin"}
	kc.CurrentContext = "testenv"
	if err := clientcmd.WriteToFile(*kc, path); err != nil {
		return fmt.Errorf("writing kubeconfig %s: %w", path, err)
	}
	return nil
}

func lookPath(file, hint string) (string, error) {
	path, err := exec.LookPath(file)
	if err != nil {
		return "", fmt.Errorf("%s not found: %s: %w", file, hint, err)
	}
	return path, nil
}

func httpOK(ctx context.Context, url string) bool {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return false
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return false
	}
	resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}

// controllers is kube-controller-manager's --controllers: what the API tiers need, plus the
// node's when Options.NodeControllers is set.
func controllers(opts Options) string {
	c := "disruption-controller,serviceaccount-controller,serviceaccount-token-controller," +
		"root-ca-certificate-publisher-controller,garbage-collector-controller,namespace-controller"
	if opts.NodeControllers {
		c += ",daemonset-controller,deployment-controller,replicaset-controller,node-lifecycle-controller,pod-garbage-collector-controller"
	}
	return c
}
