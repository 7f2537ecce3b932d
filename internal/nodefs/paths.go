package nodefs

// The node's directories as the kubelet and containerd place them by
// default: declared once, for the flags (node.Paths) and for the parts that
// read or clean them (monitor, reclaim) when given none.
const (
	// DefaultKubeletRootDir is the kubelet's --root-dir, whose filesystem is nodefs.
	DefaultKubeletRootDir = "/var/lib/kubelet"
	// DefaultPodLogsDir is where the kubelet writes container logs, one directory per pod.
	DefaultPodLogsDir = "/var/log/pods"
	// DefaultImageFsDir is containerd's root, read for imagefs when the CRI cannot say.
	DefaultImageFsDir = "/var/lib/containerd"
)
