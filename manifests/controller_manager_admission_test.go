package manifests_test

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	jkev1alpha1 "github.com/staticip/staticip/apis/jke/v1alpha1"
	"github.com/staticip/staticip/internal/testenv"
)

// manifests/controller-manager on a real API server: the manager's Node patches (RBAC: patch
// on every Node, for node failover) are confined to what node failover writes — the
// failover-for label and removing the spare taint — and nothing else of any Node.
func TestControllerManagerNodeWrites(t *testing.T) {
	env := testenv.Get(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	admin := kubernetes.NewForConfigOrDie(env.Config)
	if err := testenv.ApplyKustomization(ctx, env.Config, "controller-manager", "Deployment"); err != nil {
		t.Fatal(err)
	}
	node := "spare-" + fmt.Sprint(time.Now().UnixNano()%1000000)
	if _, err := admin.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: node, Labels: map[string]string{"zone": "a"}},
		Spec: corev1.NodeSpec{Taints: []corev1.Taint{{Key: "other", Effect: corev1.TaintEffectNoSchedule},
			{Key: jkev1alpha1.TaintSpare, Effect: corev1.TaintEffectNoSchedule}}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = admin.CoreV1().Nodes().Delete(context.Background(), node, metav1.DeleteOptions{}) })
	cfg := rest.CopyConfig(env.Config)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: controllerUser}
	manager := kubernetes.NewForConfigOrDie(cfg)
	patch := func(p string, dryRun bool) error {
		o := metav1.PatchOptions{}
		if dryRun {
			o.DryRun = []string{metav1.DryRunAll}
		}
		_, err := manager.CoreV1().Nodes().Patch(ctx, node, types.MergePatchType, []byte(p), o)
		return err
	}
	const unschedulable = `{"spec":{"unschedulable":true}}`
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		if err := patch(unschedulable, true); apierrors.IsForbidden(err) && !apierrors.IsNotFound(err) {
			if err := patch(`{"metadata":{"labels":{"`+jkev1alpha1.LabelFailoverFor+`":"probe"}}}`, true); err == nil {
				break // RBAC in force, and the policy refuses
			}
		}
	}
	for what, p := range map[string]string{
		"label another key":       `{"metadata":{"labels":{"zone":"b"}}}`,
		"annotate":                `{"metadata":{"annotations":{"x":"y"}}}`,
		"make it unschedulable":   unschedulable,
		"add a taint":             `{"spec":{"taints":[{"key":"other","effect":"NoSchedule"},{"key":"` + jkev1alpha1.TaintSpare + `","effect":"NoSchedule"},{"key":"evil","effect":"NoExecute"}]}}`,
		"remove another taint":    `{"spec":{"taints":[{"key":"` + jkev1alpha1.TaintSpare + `","effect":"NoSchedule"}]}}`,
		"claim and label at once": `{"metadata":{"labels":{"zone":"b","` + jkev1alpha1.LabelFailoverFor + `":"n1"}}}`,
	} {
		if err := patch(p, false); err == nil || !apierrors.IsForbidden(err) {
			t.Errorf("the controller-manager could %s a Node: %v", what, err)
		} else {
			t.Logf("refused as it should: %s: %v", what, err)
		}
	}
	if err := manager.CoreV1().Nodes().Delete(ctx, node, metav1.DeleteOptions{DryRun: []string{metav1.DryRunAll}}); err == nil {
		t.Errorf("the controller-manager could delete a Node")
	}
	// What node failover does: claim the spare, remove its spare taint (keeping the others,
	// here also the not-ready taint the API server added), release the claim.
	if err := patch(`{"metadata":{"labels":{"`+jkev1alpha1.LabelFailoverFor+`":"n1"}}}`, false); err != nil {
		t.Errorf("the controller-manager cannot claim a spare: %v", err)
	}
	cur, err := admin.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	kept := slices.DeleteFunc(slices.Clone(cur.Spec.Taints), func(t corev1.Taint) bool { return t.Key == jkev1alpha1.TaintSpare })
	body, _ := json.Marshal(map[string]any{"spec": map[string]any{"taints": kept}})
	if err := patch(string(body), false); err != nil {
		t.Errorf("the controller-manager cannot remove the spare taint: %v", err)
	}
	if err := patch(`{"metadata":{"labels":{"`+jkev1alpha1.LabelFailoverFor+`":null}}}`, false); err != nil {
		t.Errorf("the controller-manager cannot release a spare: %v", err)
	}
	got, err := admin.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got.Labels["zone"] != "a" || got.Labels[jkev1alpha1.LabelFailoverFor] != "" || len(got.Annotations) != 0 || got.Spec.Unschedulable ||
		len(got.Spec.Taints) != len(kept) || slices.ContainsFunc(got.Spec.Taints, func(t corev1.Taint) bool { return t.Key == jkev1alpha1.TaintSpare }) {
		t.Errorf("node after the patches: labels %v annotations %v unschedulable %v taints %v", got.Labels, got.Annotations, got.Spec.Unschedulable, got.Spec.Taints)
	}
}
