//go:build e2e

package e2e_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	"github.com/evictiond/evictiond/test/e2e/cluster"
)

// documentedInstall is what an operator copies from README.md and docs/install.md, read
// from the files (never a copy here), so a doc that drifts from what works fails the test.
type documentedInstall struct {
	// README.md's install block: the namespace and its Pod Security label.
	namespace []string
	// docs/install.md: loading the image on a test node with containerd.
	importImage string
	// docs/install.md's "Helm and kustomize side by side", the Helm column.
	install, check, upgrade, uninstall []string
	// docs/install.md's "Uninstalling": the taints and conditions evictiond leaves.
	cleanup []string
}

var backticked = regexp.MustCompile("`([^`]+)`")

func readDocumentedInstall(t *testing.T) documentedInstall {
	t.Helper()
	root, err := cluster.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	readme, err := os.ReadFile(filepath.Join(root, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	install, err := os.ReadFile(filepath.Join(root, "docs", "install.md"))
	if err != nil {
		t.Fatal(err)
	}
	var d documentedInstall
	block := regexp.MustCompile("(?s)## Install\n.*?```sh\n(.*?)```").FindSubmatch(readme)
	if block == nil {
		t.Fatal("README.md: no ```sh block under ## Install")
	}
	for _, line := range strings.Split(string(block[1]), "\n") {
		line, _, _ = strings.Cut(line, "  #") // the explaining comment
		if line = strings.TrimSpace(line); strings.HasPrefix(line, "kubectl create namespace ") || strings.HasPrefix(line, "kubectl label namespace ") {
			d.namespace = append(d.namespace, line)
		}
	}
	for _, row := range []struct {
		name string
		to   *[]string
	}{{"install", &d.install}, {"check", &d.check}, {"upgrade", &d.upgrade}, {"uninstall", &d.uninstall}} {
		m := regexp.MustCompile(`(?m)^\| ` + row.name + ` \| (.*?) \| .*\|$`).FindSubmatch(install)
		if m == nil {
			t.Fatalf("docs/install.md: no %q row in the Helm and kustomize table", row.name)
		}
		for _, c := range backticked.FindAllSubmatch(m[1], -1) {
			if cmd := string(c[1]); strings.HasPrefix(cmd, "helm ") || strings.HasPrefix(cmd, "kubectl ") {
				*row.to = append(*row.to, cmd)
			}
		}
	}
	for _, line := range strings.Split(string(install), "\n") { // code spans do not cross lines here
		for _, c := range backticked.FindAllStringSubmatch(line, -1) {
			switch cmd := c[1]; {
			case strings.HasPrefix(cmd, "ctr -n k8s.io images import "):
				d.importImage = cmd
			case strings.HasPrefix(cmd, "kubectl taint nodes --all evictiond.io/"), strings.HasPrefix(cmd, "kubectl get nodes -o name | xargs"):
				d.cleanup = append(d.cleanup, cmd)
			}
		}
	}
	if len(d.namespace) != 2 || d.importImage == "" || len(d.install) < 3 || len(d.check) == 0 || len(d.upgrade) != 1 ||
		len(d.uninstall) != 1 || len(d.cleanup) != 4 {
		t.Fatalf("the documented commands are not all found: %+v", d)
	}
	// README's namespace lines are docs/install.md's first two: one way to install.
	for i, cmd := range d.namespace {
		if d.install[i] != cmd {
			t.Errorf("README.md says %q, docs/install.md %q", cmd, d.install[i])
		}
	}
	return d
}

// docShell runs documented commands as an operator's shell would: in a directory laid out
// as a checkout after `make image` (charts/, bin/evictiond-image.tar, my-values.yaml), with
// KUBECONFIG, CONTAINERD_ADDRESS and PATH (Helm, ctr, kubectl) pointing at this cluster.
type docShell struct {
	dir, values string
	env         []string
}

// newDocShell: values are this cluster's chart values (its paths and ports on a shared
// machine: cluster.HelmValues), added with -f to every helm install and upgrade; they are
// the only words the test adds to a documented command.
func newDocShell(t *testing.T, c *cluster.Cluster, helm, archive string) *docShell {
	t.Helper()
	root, err := cluster.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(c.Dir, "operator")
	for _, d := range []string{dir, filepath.Join(dir, "bin")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for link, target := range map[string]string{"charts": filepath.Join(root, "charts"), "bin/evictiond-image.tar": archive} {
		if err := os.Symlink(target, filepath.Join(dir, link)); err != nil {
			t.Fatal(err)
		}
	}
	values, err := c.HelmValues(root, "")
	if err != nil {
		t.Fatal(err)
	}
	// The scenarios replay the agent's trace at their end (replay_test.go).
	values["extraArgs"] = append(values["extraArgs"].([]string), traceArgs...)
	c.RecordsTrace = true
	data, err := yaml.Marshal(values)
	if err != nil {
		t.Fatal(err)
	}
	s := &docShell{dir: dir, values: filepath.Join(c.Dir, "cluster-values.yaml")}
	if err := os.WriteFile(s.values, data, 0o644); err != nil {
		t.Fatal(err)
	}
	ctrDir := os.Getenv("EVICTIOND_CONTAINERD_BIN")
	if ctrDir == "" {
		t.Fatal("EVICTIOND_CONTAINERD_BIN is not set (ctr): run through make test-e2e")
	}
	if _, err := exec.LookPath("kubectl"); err != nil {
		t.Fatal("kubectl not found in PATH: install it (Debian package kubernetes-client)")
	}
	s.env = append(os.Environ(), "KUBECONFIG="+c.KubeconfigPath, "CONTAINERD_ADDRESS="+c.Containerd.Socket,
		"PATH="+filepath.Dir(helm)+":"+ctrDir+":"+os.Getenv("PATH"),
		"HELM_CACHE_HOME="+filepath.Join(c.Dir, "helm", "cache"), "HELM_CONFIG_HOME="+filepath.Join(c.Dir, "helm", "config"),
		"HELM_DATA_HOME="+filepath.Join(c.Dir, "helm", "data"))
	return s
}

// run runs one documented command with sh and returns its output.
func (s *docShell) run(ctx context.Context, cmd string) (string, error) {
	if strings.HasPrefix(cmd, "helm install ") || strings.HasPrefix(cmd, "helm upgrade ") {
		cmd += " -f " + s.values
	}
	c := exec.CommandContext(ctx, "sh", "-c", cmd)
	c.Dir, c.Env = s.dir, s.env
	out, err := c.CombinedOutput()
	return string(out), err
}

func (s *docShell) mustRun(t *testing.T, cmds ...string) {
	t.Helper()
	for _, cmd := range cmds {
		start := time.Now()
		out, err := s.run(context.Background(), cmd)
		if err != nil {
			t.Fatalf("documented command failed: %s\n%v\n%s", cmd, err, out)
		}
		t.Logf("$ %s   (%s)\n%s", cmd, time.Since(start).Round(time.Millisecond), strings.TrimSpace(out))
	}
}

// installAsDocumented loads the image and installs the chart with the documented commands,
// then waits for the agent Ready; it returns how long the operator's steps took.
func installAsDocumented(t *testing.T, c *cluster.Cluster, helm string, doc documentedInstall) (*docShell, time.Duration) {
	t.Helper()
	ctx := context.Background()
	archive, err := cluster.EvictiondImageArchive(ctx)
	if err != nil {
		t.Fatal(err)
	}
	sh := newDocShell(t, c, helm, archive)
	start := time.Now()
	sh.mustRun(t, doc.importImage)
	sh.mustRun(t, doc.install...) // the namespace, its label, helm install --wait
	if _, err := c.WaitEvictiondReady(ctx, 2*time.Minute); err != nil {
		t.Fatalf("after the documented install: %v", err)
	}
	return sh, time.Since(start)
}

// uninstallAsDocumented runs the documented uninstall and the clean-up of what evictiond
// left on the node, then checks nothing of it is left: no DaemonSet, no evictiond.io taint, no
// Evictiond* condition.
func uninstallAsDocumented(t *testing.T, c *cluster.Cluster, sh *docShell, doc documentedInstall) {
	t.Helper()
	ctx := context.Background()
	sh.mustRun(t, doc.uninstall...)
	for _, cmd := range doc.cleanup {
		// kubectl taint exits 1 when a node does not have the taint, as the doc says.
		out, err := sh.run(ctx, cmd)
		t.Logf("$ %s\n%s (%v)", cmd, strings.TrimSpace(out), err)
	}
	if _, err := c.Client.AppsV1().DaemonSets(cluster.EvictiondNamespace).Get(ctx, cluster.EvictiondDaemonSet, metav1.GetOptions{}); err == nil {
		t.Errorf("the DaemonSet %s is still there after the documented uninstall", cluster.EvictiondDaemonSet)
	}
	node, err := c.Client.CoreV1().Nodes().Get(ctx, cluster.NodeName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, taint := range node.Spec.Taints {
		if strings.HasPrefix(taint.Key, "evictiond.io/") {
			t.Errorf("taint %s left on the node after the documented uninstall and clean-up", taint.Key)
		}
	}
	for _, cond := range node.Status.Conditions {
		if strings.HasPrefix(string(cond.Type), "Evictiond") {
			t.Errorf("condition %s=%s left on the node after the documented uninstall and clean-up", cond.Type, cond.Status)
		}
	}
}
