package enhancedstatefulset

// Pod writes (upstream's stateful_pod_control.go): a new pod of an ordinal, with its claims
// and StaticIP record first, and a pod's deletion. Every write is registered with the
// own-writes overlay (own_writes.go) before it is sent.

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"

	jkev1 "github.com/staticip/staticip/apis/jke/v1"
	jkev1alpha1 "github.com/staticip/staticip/apis/jke/v1alpha1"
	"github.com/staticip/staticip/apis/podip"
	"github.com/staticip/staticip/controllers/pkg/staticip"
)

// ReasonTemplateIPAddressIgnored: the Warning Event on a set whose pod template carries
// staticip.jke.jdcloud.com/ip-address; its pods do not get it (see newPod).
const ReasonTemplateIPAddressIgnored = "TemplateIPAddressIgnored"

// newPod builds the pod of ordinal from template: name {set}-{ordinal}, stable hostname and
// subdomain, the StatefulSet labels, the revision label and PVC volumes.
func newPod(set *jkev1alpha1.EnhancedStatefulSet, template *corev1.PodTemplateSpec, ordinal int, revision string) *corev1.Pod {
	name := PodName(set.Name, ordinal)
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name: name, Namespace: set.Namespace,
			Labels:          map[string]string{},
			Annotations:     map[string]string{},
			OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(set, controllerKind)},
		},
		Spec: *template.Spec.DeepCopy(),
	}
	for k, v := range template.Labels {
		pod.Labels[k] = v
	}
	for k, v := range template.Annotations {
		pod.Annotations[k] = v
	}
	// The IP a pod gets comes from its StaticIP record (DecoratePod), never from the template:
	// this controller creates pods with an identity the ip-address policy trusts, so a template
	// annotation would let anyone who may write the set pick any IP (manifests/admission).
	delete(pod.Annotations, podip.AnnotationIPAddress)
	pod.Labels[PodNameLabel] = name
	pod.Labels[PodIndexLabel] = strconv.Itoa(ordinal)
	pod.Labels[RevisionLabel] = revision
	pod.Spec.Hostname = name
	pod.Spec.Subdomain = set.Spec.ServiceName
	if ru := set.Spec.UpdateStrategy.RollingUpdate; ru != nil && ru.PodUpdatePolicy == jkev1alpha1.InPlaceIfPossiblePodUpdatePolicy &&
		!slices.ContainsFunc(pod.Spec.ReadinessGates, func(g corev1.PodReadinessGate) bool { return g.ConditionType == InPlaceUpdateReady }) {
		pod.Spec.ReadinessGates = append(pod.Spec.ReadinessGates, corev1.PodReadinessGate{ConditionType: InPlaceUpdateReady})
	}
	// Volumes of the claim templates replace template volumes of the same name.
	claims := map[string]bool{}
	for _, claim := range set.Spec.VolumeClaimTemplates {
		claims[claim.Name] = true
	}
	var volumes []corev1.Volume
	for _, v := range pod.Spec.Volumes {
		if !claims[v.Name] {
			volumes = append(volumes, v)
		}
	}
	for _, claim := range set.Spec.VolumeClaimTemplates {
		volumes = append(volumes, corev1.Volume{Name: claim.Name, VolumeSource: corev1.VolumeSource{
			PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: ClaimName(set, claim.Name, ordinal)}}})
	}
	pod.Spec.Volumes = volumes
	return pod
}

// createPod creates the PVCs and the StaticIP of an ordinal, then the pod itself.
func (c *Controller) createPod(ctx context.Context, set *jkev1alpha1.EnhancedStatefulSet, a Action, template *corev1.PodTemplateSpec) error {
	if template == nil {
		return fmt.Errorf("no template for revision %s", a.Revision)
	}
	pod := newPod(set, template, a.Ordinal, a.Revision)
	if ip, ok := template.Annotations[podip.AnnotationIPAddress]; ok {
		c.recorder.Eventf(set, corev1.EventTypeWarning, ReasonTemplateIPAddressIgnored,
			"pod %s: the template's %s=%s is not copied (a pod's IP comes from its StaticIP record; ask for an IP on a pod in a namespace labelled %s=true)",
			pod.Name, podip.AnnotationIPAddress, ip, jkev1.LabelAllowIPRequest)
	}
	if err := c.ensureClaims(ctx, set, a.Ordinal, nil); err != nil {
		if errors.Is(err, errClaimGoing) {
			return err // retried; not a failure
		}
		c.recorder.Eventf(set, corev1.EventTypeWarning, "FailedCreate", "create claims for pod %s: %v", pod.Name, err)
		return err
	}
	if staticip.Enabled(set.Annotations, set.Spec.Template.Annotations) {
		w := staticip.EnhancedStatefulSetWorkload(set)
		sip, claimed := c.preclaimedStaticIP(w, pod.Name)
		var err error
		if !claimed {
			sip, err = staticip.Ensure(ctx, c.client, c.sipLister, w, pod.Name, c.now())
		}
		if err != nil {
			var releasing *staticip.ReleasingError
			if errors.As(err, &releasing) || apierrors.IsConflict(err) || apierrors.IsAlreadyExists(err) {
				return err // a release or another write raced with us: retried, nothing to report
			}
			reason := "FailedCreateStaticIP"
			var conflict *staticip.ConflictError
			if errors.As(err, &conflict) {
				reason = "StaticIPConflict"
			}
			// The pod is not created without its record: it would get an IP nobody keeps.
			c.recorder.Eventf(set, corev1.EventTypeWarning, reason, "pod %s: %v", pod.Name, err)
			return err
		}
		staticip.DecoratePod(pod, sip)
	}
	c.writes.expect(setKey(set), pod.Name, expectation{})
	created, err := c.kubeClient.CoreV1().Pods(set.Namespace).Create(ctx, pod, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		c.writes.forget(setKey(set), pod.Name)
		// Ours (the cache has not shown it yet) is fine; anything else holds the ordinal's name
		// and the set cannot run that ordinal until a human removes it.
		existing, getErr := c.kubeClient.CoreV1().Pods(set.Namespace).Get(ctx, pod.Name, metav1.GetOptions{})
		if getErr == nil {
			if ref := metav1.GetControllerOf(existing); ref != nil && ref.UID == set.UID {
				return nil
			}
		}
		err = fmt.Errorf("create Pod %s: %w (a pod of that name that this set does not control: %s)", pod.Name, err, describeOwner(existing))
		c.recorder.Eventf(set, corev1.EventTypeWarning, "FailedCreate", "%v", err)
		return &createError{err: err}
	}
	if err != nil {
		c.writes.forget(setKey(set), pod.Name)
		c.recorder.Eventf(set, corev1.EventTypeWarning, "FailedCreate", "create Pod %s: %v", pod.Name, err)
		return err
	}
	c.writes.expect(setKey(set), pod.Name, expectation{written: created})
	c.recorder.Eventf(set, corev1.EventTypeNormal, "SuccessfulCreate", "create Pod %s at revision %s", pod.Name, a.Revision)
	return nil
}

// createError is a pod creation that failed in a way a human must resolve (reported in the
// ReplicaFailure condition).
type createError struct{ err error }

func (e *createError) Error() string { return e.err.Error() }

func (e *createError) Unwrap() error { return e.err }

func (c *Controller) deletePod(ctx context.Context, set *jkev1alpha1.EnhancedStatefulSet, pod *corev1.Pod, reason DeleteReason) error {
	if pod == nil {
		return nil
	}
	klog.FromContext(ctx).V(2).Info("Deleting pod", "pod", klog.KObj(pod), "uid", pod.UID, "reason", reason, "node", pod.Spec.NodeName,
		"phase", pod.Status.Phase, "revision", PodRevision(pod))
	c.writes.expect(setKey(set), pod.Name, expectation{deletedUID: pod.UID})
	err := c.kubeClient.CoreV1().Pods(set.Namespace).Delete(ctx, pod.Name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &pod.UID}})
	if apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
		return nil
	}
	if err != nil {
		c.writes.forget(setKey(set), pod.Name)
		c.recorder.Eventf(set, corev1.EventTypeWarning, "FailedDelete", "delete Pod %s (%s): %v", pod.Name, reason, err)
		return err
	}
	switch reason {
	case ReasonInPlaceTimeout:
		c.recorder.Eventf(set, corev1.EventTypeWarning, "InPlaceUpdateTimeout", "delete Pod %s to recreate it: its in-place update did not reach the kubelet within %v (%s)",
			pod.Name, c.InPlaceUpdateTimeout, podProblem(pod, set.Spec.MinReadySeconds, c.now()))
	case ReasonUnavailable:
		c.recorder.Eventf(set, corev1.EventTypeNormal, "SuccessfulDelete", "delete Pod %s to replace it at the update revision: it is unavailable (%s) on revision %s",
			pod.Name, podProblem(pod, set.Spec.MinReadySeconds, c.now()), PodRevision(pod))
	default:
		c.recorder.Eventf(set, corev1.EventTypeNormal, "SuccessfulDelete", "delete Pod %s (%s)", pod.Name, reason)
	}
	return nil
}
