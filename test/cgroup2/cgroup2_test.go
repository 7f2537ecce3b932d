//go:build cgroup2

// Package cgroup2 is the cgroup v2 test tier (make test-cgroup2): it boots
// Debian's stock kernel in qemu with cgroup v2 only (internal/testenv/vm),
// runs the v2 integration tests of internal/notify, internal/monitor,
// internal/brake and the capability tests of test/cgroup2/caps there as
// static test binaries, and reports every guest test
// as a subtest here. A guest test that fails, is skipped or never reports
// fails this one.
package cgroup2

import (
	"context"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/evictiond/evictiond/internal/testenv/apiserver"
	"github.com/evictiond/evictiond/internal/testenv/vm"
	"github.com/evictiond/evictiond/test/cgroup2/agent"
)

// moduleRoot is where `go test -c` builds from (this package is test/cgroup2).
const moduleRoot = "../.."

// Guest paths of what the agent scenarios need from the host.
const (
	guestKubeconfigPath = "/etc/evictiond/kubeconfig"
	guestEvictiond      = "/bin/evictiond"
)

func suites() []*vm.Suite {
	return []*vm.Suite{
		{Name: "notify", Package: "./internal/notify", Tags: "integration cgroup2", Run: "^TestCgroup2"},
		{Name: "monitor", Package: "./internal/monitor", Tags: "integration cgroup2", Run: "^TestCgroup2"},
		{Name: "brake", Package: "./internal/brake", Tags: "integration cgroup2", Run: "^TestCgroup2"},
		{Name: "caps", Package: "./test/cgroup2/caps", Tags: "integration cgroup2", Run: "^TestCgroup2Cap_"},
		{Name: "agent", Package: "./test/cgroup2/agent", Tags: "integration cgroup2", Run: "^TestCgroup2Agent", Timeout: 10 * time.Minute,
			Env: []string{agent.KubeconfigEnv + "=" + guestKubeconfigPath, agent.BinaryEnv + "=" + guestEvictiond}},
	}
}

// suitesEnv narrows the run to some suites (comma-separated names), e.g.
// EVICTIOND_VM_SUITES=brake while working on one (make test-cgroup2
// CGROUP2_SUITES=brake). Empty: every suite.
const suitesEnv = "EVICTIOND_VM_SUITES"

func TestCgroup2VM(t *testing.T) {
	ss := suites()
	if only := os.Getenv(suitesEnv); only != "" {
		names := strings.Split(only, ",")
		ss = slices.DeleteFunc(ss, func(s *vm.Suite) bool { return !slices.Contains(names, s.Name) })
		if len(ss) == 0 {
			t.Fatalf("%s=%q names no suite (have notify, monitor, brake, caps, agent)", suitesEnv, only)
		}
	}
	var configure func(*vm.Options)
	if slices.ContainsFunc(ss, func(s *vm.Suite) bool { return s.Name == "agent" }) {
		configure = agentGuest(t)
	}
	results := runVM(t, ss, configure)
	for _, s := range ss {
		t.Run(s.Name, func(t *testing.T) { vm.Mirror(t, s, results[s.Name]) })
	}
}

// agentGuest prepares what the agent scenarios need: the control plane, a
// real etcd and kube-apiserver on this machine's loopback (random ports),
// which the guest reaches as 10.0.2.2 through qemu's user networking, an
// admin kubeconfig for that address, and a static evictiond binary.
func agentGuest(t *testing.T) func(*vm.Options) {
	t.Helper()
	env, err := apiserver.Start(apiserver.Options{})
	if err != nil {
		t.Fatalf("starting the API server environment (make test-cgroup2 installs etcd and builds kube-apiserver): %v", err)
	}
	t.Cleanup(env.Stop)
	kubeconfig, err := guestKubeconfig(env)
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(t.TempDir(), "evictiond")
	build := exec.Command("go", "build", "-trimpath", "-ldflags=-s -w", "-o", bin, "./cmd/evictiond")
	build.Dir = moduleRoot
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building a static evictiond: %v\n%s", err, out)
	}
	return func(o *vm.Options) {
		o.Network = true
		o.Files[guestKubeconfigPath] = vm.File{Data: kubeconfig, Mode: 0o600}
		o.Files[guestEvictiond] = vm.File{Source: bin}
	}
}

// BenchmarkCgroup2VM runs the v2 fast path's benchmarks in the VM and prints
// their figures here (make bench-cgroup2; one VM run whatever b.N).
func BenchmarkCgroup2VM(b *testing.B) {
	// EVICTIOND_VM_RAMPS (make bench-cgroup2 RAMPS=100) ramps per variant;
	// EVICTIOND_VM_RAMP_BENCH narrows the variants (e.g. /adaptive).
	ramps, benchRamp := "40x", "^BenchmarkCgroup2WakeLatencyRamp$"
	if v := os.Getenv("EVICTIOND_VM_RAMPS"); v != "" {
		ramps = v + "x"
	}
	if v := os.Getenv("EVICTIOND_VM_RAMP_BENCH"); v != "" {
		benchRamp += v
	}
	ss := []*vm.Suite{
		{Name: "notify-ramp", Package: "./internal/notify", Tags: "integration cgroup2", Bench: benchRamp, Benchtime: ramps, Timeout: 20 * time.Minute},
		{Name: "notify-idle", Package: "./internal/notify", Tags: "integration cgroup2", Bench: "^BenchmarkCgroup2PollIdleCPU$", Benchtime: "1x"},
	}
	results := runVM(b, ss, nil)
	for _, s := range ss {
		r := results[s.Name]
		if r == nil || r.ExitStatus != 0 {
			b.Errorf("suite %s: no result or the guest's binary failed (%+v); VM output in the test's temp dir", s.Name, r)
			continue
		}
		lines := r.BenchLines()
		if len(lines) == 0 {
			b.Errorf("suite %s: no benchmark result from the guest", s.Name)
		}
		for _, l := range lines {
			b.Logf("guest: %s", l)
		}
	}
}

// runVM builds the suites, boots the VM once with all of them and returns
// their results.
func runVM(t testing.TB, ss []*vm.Suite, configure func(*vm.Options)) map[string]*vm.SuiteResult {
	t.Helper()
	kernel, err := vm.Kernel()
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	dir := t.TempDir()
	start := time.Now()
	if err := vm.BuildSuites(ctx, filepath.Join(moduleRoot), dir, ss); err != nil {
		t.Fatal(err)
	}
	t.Logf("built %d static test binaries in %v", len(ss), time.Since(start).Round(time.Millisecond))
	opts := vm.Options{
		Kernel:  kernel,
		Dir:     dir,
		Files:   vm.Files(ss),
		Script:  vm.Script(ss),
		Disk:    true,
		Timeout: 15 * time.Minute,
	}
	if configure != nil {
		configure(&opts)
	}
	t.Cleanup(func() { keepOnFailure(t, dir) })
	res, err := vm.Run(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("VM: /init after %v, powered off after %v, script exit %d", res.Boot.Round(time.Millisecond), res.Total.Round(time.Millisecond), res.ExitStatus)
	results, err := vm.ParseSuites(ctx, res.Output, ss)
	if err != nil {
		t.Fatal(err)
	}
	return results
}

// guestKubeconfig is the environment's admin kubeconfig as the guest uses
// it: the API server at the host's address on the user network, its serving
// certificate verified for "localhost" (one of its names; the guest's
// 10.0.2.2 is not).
func guestKubeconfig(env *apiserver.Env) ([]byte, error) {
	u, err := url.Parse(env.Config.Host)
	if err != nil {
		return nil, fmt.Errorf("API server address %q: %w", env.Config.Host, err)
	}
	kc := clientcmdapi.NewConfig()
	kc.Clusters["host"] = &clientcmdapi.Cluster{Server: "https://" + net.JoinHostPort(vm.HostAddr, u.Port()),
		CertificateAuthorityData: env.CACertPEM, TLSServerName: "localhost"}
	kc.AuthInfos["admin"] = &clientcmdapi.AuthInfo{Token: env.Config.BearerToken}
	kc.Contexts["host"] = &clientcmdapi.Context{Cluster: "host", AuthInfo: "admin"}
	kc.CurrentContext = "host"
	return clientcmd.Write(*kc)
}

// keepOnFailure copies the VM's output and console logs out of the test's
// temporary directory when the test failed, and says where.
func keepOnFailure(t testing.TB, dir string) {
	if !t.Failed() {
		return
	}
	keep, err := os.MkdirTemp("", "evictiond-cgroup2-")
	if err != nil {
		t.Logf("keeping the VM's logs: %v", err)
		return
	}
	for _, name := range []string{"output.log", "console.log"} {
		if data, err := os.ReadFile(filepath.Join(dir, name)); err == nil {
			_ = os.WriteFile(filepath.Join(keep, name), data, 0o644)
		}
	}
	t.Logf("the VM's output and console logs are kept in %s", keep)
}
