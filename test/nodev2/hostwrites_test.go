//go:build nodev2

package nodev2

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/evictiond/evictiond/internal/testenv/hostprobe"
)

// testHostWritesRefused runs the host-write probe (internal/testenv/hostprobe) in the agent's
// pod on the cgroup v2 node, whose kernel (Debian's) has every probed file, sysrq-trigger
// included: each is refused (read-only file system), and what the agent writes is not.
func testHostWritesRefused(t *testing.T, n *node) {
	pod := n.evictiondPod(t, "", time.Minute)
	res, err := hostprobe.Run(context.Background(), n.client, pod, "evictiond", "host-write-probe")
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("probe:\n%s", strings.Join(res.Lines, "\n"))
	for _, f := range res.Failures() {
		t.Error(f)
	}
	for _, p := range res.Absent() {
		t.Errorf("%s: absent on the node", p)
	}
}
