// Package agent runs the evictiond binary on cgroup v2, end to end without a
// kubelet: this test binary and bin/evictiond run inside the cgroup v2 VM of
// test/cgroup2 (make test-cgroup2), against the real kube-apiserver and etcd
// the host test started (reached through qemu's user networking). The test
// creates the Node and the Pods, runs each pod as real processes in its own
// v2 pod cgroup under kubepods, and stands in for the kubelet's bookkeeping
// only: when a pod is being deleted (an eviction was accepted) it kills the
// pod's processes (cgroup.kill), removes its cgroups and deletes the object,
// as a kubelet would. Everything else — reading the kernel, deciding,
// evicting, node conditions and taints — is evictiond's.
package agent

// Set by the host test (test/cgroup2) in the guest's environment.
const (
	// KubeconfigEnv names an admin kubeconfig reaching the host's API server.
	KubeconfigEnv = "EVICTIOND_VM_KUBECONFIG"
	// BinaryEnv names the static evictiond binary in the guest.
	BinaryEnv = "EVICTIOND_BIN"
)
