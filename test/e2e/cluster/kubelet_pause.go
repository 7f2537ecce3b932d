//go:build e2e

package cluster

import (
	"fmt"
	"sync"
	"syscall"
)

// PauseKubelet stops the kubelet process (SIGSTOP): a kubelet that does not act on a
// deletion, as one stuck in a slow runtime call or a full PLEG relist does. The node's
// lease is not renewed meanwhile; keep the pause well under its 40 s. The returned resume
// (SIGCONT) is idempotent and also registered with the cluster's teardown by the caller.
func (c *Cluster) PauseKubelet() (resume func(), err error) {
	pid := c.kubelet.Pid()
	if pid == 0 {
		return nil, fmt.Errorf("the kubelet is not running")
	}
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		return nil, fmt.Errorf("stopping the kubelet (pid %d): %w", pid, err)
	}
	var once sync.Once
	return func() { once.Do(func() { _ = syscall.Kill(pid, syscall.SIGCONT) }) }, nil
}
