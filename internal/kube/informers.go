package kube

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
)

// NodeInformers are Pod and Node caches that hold only this node's objects: the list and
// watch requests carry field selectors (spec.nodeName for pods, metadata.name for the
// node), so each agent's API load and memory depend on its own node, never on the size
// of the cluster.
type NodeInformers struct {
	NodeName string
	Pods     corelisters.PodLister
	Node     corelisters.NodeLister

	podInformer  cache.SharedIndexInformer
	nodeInformer cache.SharedIndexInformer
	factories    []informers.SharedInformerFactory
}

// NewNodeInformers builds (but does not start) the node-scoped informers. resync is the
// informers' resync period; 0 disables resync, which is right for evictiond: handlers
// react to watch events and periodic checks read the cache, so resync adds nothing.
func NewNodeInformers(client kubernetes.Interface, nodeName string, resync time.Duration) (*NodeInformers, error) {
	if nodeName == "" {
		return nil, fmt.Errorf("node name: value %q: must not be empty", nodeName)
	}
	podFactory := informers.NewSharedInformerFactoryWithOptions(client, resync,
		informers.WithTweakListOptions(func(o *metav1.ListOptions) {
			o.FieldSelector = fields.OneTermEqualSelector("spec.nodeName", nodeName).String()
		}),
		informers.WithTransform(stripManagedFields))
	nodeFactory := informers.NewSharedInformerFactoryWithOptions(client, resync,
		informers.WithTweakListOptions(func(o *metav1.ListOptions) {
			o.FieldSelector = fields.OneTermEqualSelector("metadata.name", nodeName).String()
		}),
		informers.WithTransform(stripManagedFields))
	pods := podFactory.Core().V1().Pods()
	nodes := nodeFactory.Core().V1().Nodes()
	return &NodeInformers{
		NodeName:     nodeName,
		Pods:         pods.Lister(),
		Node:         nodes.Lister(),
		podInformer:  pods.Informer(),
		nodeInformer: nodes.Informer(),
		factories:    []informers.SharedInformerFactory{podFactory, nodeFactory},
	}, nil
}

// stripManagedFields drops metadata.managedFields before an object enters the cache:
// evictiond never reads them, and they are often the largest part of a pod or node.
func stripManagedFields(obj any) (any, error) {
	if accessor, err := meta.Accessor(obj); err == nil {
		accessor.SetManagedFields(nil)
	}
	return obj, nil
}

// AddNodeHandler registers a handler for changes of the node object; call before Start.
func (n *NodeInformers) AddNodeHandler(h cache.ResourceEventHandler) error {
	if _, err := n.nodeInformer.AddEventHandler(h); err != nil {
		return fmt.Errorf("adding node event handler: %w", err)
	}
	return nil
}

// AddPodHandler registers a handler for changes of this node's pods; call before Start.
func (n *NodeInformers) AddPodHandler(h cache.ResourceEventHandler) error {
	if _, err := n.podInformer.AddEventHandler(h); err != nil {
		return fmt.Errorf("adding pod event handler: %w", err)
	}
	return nil
}

// Start runs the informers until ctx ends and waits for their first sync.
func (n *NodeInformers) Start(ctx context.Context) error {
	for _, f := range n.factories {
		f.Start(ctx.Done())
	}
	if !cache.WaitForCacheSync(ctx.Done(), n.podInformer.HasSynced, n.nodeInformer.HasSynced) {
		return fmt.Errorf("waiting for the pod and node caches of node %s to sync: %w", n.NodeName, ctx.Err())
	}
	return nil
}

// Shutdown waits for the informer goroutines to end after ctx passed to Start is done.
func (n *NodeInformers) Shutdown() {
	for _, f := range n.factories {
		f.Shutdown()
	}
}

// ListPods lists this node's pods from the cache (the loop's agent.Pods). Start
// waited for the first sync, so an empty list is a node without pods.
func (n *NodeInformers) ListPods() ([]*corev1.Pod, error) {
	return n.Pods.List(labels.Everything())
}
