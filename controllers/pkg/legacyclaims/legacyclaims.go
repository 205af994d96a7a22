// Package legacyclaims is the upgrade path of the claims that say who holds a range (issue 37):
// agents of the previous release claim in their Node's annotation
// staticip.jke.jdcloud.com/ipranges-observed, current agents in the IPRanges' status.holders
// (and say so with jkev1.AnnotationClaimsInStatus). Current agents watch no Node but their own;
// this controller labels the Nodes whose agent still claims in the annotation
// (jkev1.LabelLegacyClaims=true), so that the current agents read those claims with one
// label-selected watch, and takes the label off once the node's agent is upgraded.
package legacyclaims

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	coreinformers "k8s.io/client-go/informers/core/v1"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"

	jkev1 "github.com/staticip/staticip/apis/jke/v1"
	jkev1alpha1 "github.com/staticip/staticip/apis/jke/v1alpha1"
	"github.com/staticip/staticip/controllers/pkg/worker"
)

// Name is the controller's name in --controllers, logs and metrics.
const Name = "legacyclaims"

// Legacy says whether n's agent claims in its Node annotation (an agent of the previous
// release): it carries an ipranges-observed report and not claims-in-status.
func Legacy(n *corev1.Node) bool {
	return n.Annotations[jkev1alpha1.AnnotationIPRangesObserved] != "" && n.Annotations[jkev1.AnnotationClaimsInStatus] != "true"
}

// Labelled says whether n carries the label.
func Labelled(n *corev1.Node) bool { return n.Labels[jkev1.LabelLegacyClaims] == "true" }

// Controller keeps the label in line with Legacy.
type Controller struct {
	kube   kubernetes.Interface
	nodes  corelisters.NodeLister
	synced []cache.InformerSynced
	queue  workqueue.TypedRateLimitingInterface[string]
}

// NewController wires the controller to the Node informer: a Node is queued only when what
// Legacy or Labelled reads of it changes.
func NewController(kube kubernetes.Interface, nodes coreinformers.NodeInformer) (*Controller, error) {
	c := &Controller{kube: kube, nodes: nodes.Lister(), synced: []cache.InformerSynced{nodes.Informer().HasSynced},
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.DefaultTypedControllerRateLimiter[string](),
			workqueue.TypedRateLimitingQueueConfig[string]{Name: Name})}
	enqueue := func(obj any) {
		if n, ok := obj.(*corev1.Node); ok && Legacy(n) != Labelled(n) {
			c.queue.Add(n.Name)
		}
	}
	if _, err := nodes.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: enqueue, UpdateFunc: func(_, cur any) { enqueue(cur) },
	}); err != nil {
		return nil, err
	}
	return c, nil
}

// Run processes Nodes until ctx ends.
func (c *Controller) Run(ctx context.Context, workers int) {
	worker.Run(ctx, Name, "node", c.queue, c.synced, workers, c.sync)
}

// sync sets or removes the label of one Node (a merge patch carrying the cached resourceVersion:
// a Node changed meanwhile is looked at again).
func (c *Controller) sync(ctx context.Context, name string) (time.Duration, error) {
	n, err := c.nodes.Get(name)
	if apierrors.IsNotFound(err) {
		return 0, nil
	} else if err != nil {
		return 0, err
	}
	want := Legacy(n)
	if want == Labelled(n) {
		return 0, nil
	}
	var value any // nil: a merge patch removes the label
	if want {
		value = "true"
	}
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{
		"resourceVersion": n.ResourceVersion, "labels": map[string]any{jkev1.LabelLegacyClaims: value}}})
	if err != nil {
		return 0, err
	}
	if _, err := c.kube.CoreV1().Nodes().Patch(ctx, name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil && !apierrors.IsNotFound(err) {
		return 0, fmt.Errorf("node %s label %s: %w", name, jkev1.LabelLegacyClaims, err)
	}
	return 0, nil
}
