package kube

import "k8s.io/apimachinery/pkg/util/wait"

// SetCacheBackoff sets the wait between two list-and-watch attempts of n's caches
// (tests wait milliseconds, not seconds). Call it before Start.
func SetCacheBackoff(n *NodeInformers, b wait.Backoff) {
	for _, nc := range []*nodeCache{n.pods, n.node} {
		nc.backoff = b
	}
}
