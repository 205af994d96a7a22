package manifests_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/staticip/staticip/apis/generated/clientset/versioned"
	jkev1 "github.com/staticip/staticip/apis/jke/v1"
	"github.com/staticip/staticip/apis/poolchoice"
	"github.com/staticip/staticip/apis/poolchoice/poolchoiceapi"
	"github.com/staticip/staticip/internal/testenv"
)

// manifests/admission/ippools-policy.yaml on a real API server: a pod may name (or inherit from
// its namespace) only pools that select its namespace, and each verdict matches
// apis/poolchoice.Choose, the rule the scheduler, allocator and CNI apply.
func TestIPPoolsAnnotationPolicy(t *testing.T) {
	env := testenv.Get(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	admin := kubernetes.NewForConfigOrDie(env.Config)
	jke := versioned.NewForConfigOrDie(env.Config)
	if err := testenv.ApplyKustomization(ctx, env.Config, "admission"); err != nil {
		t.Fatal(err)
	}
	sfx := fmt.Sprint(time.Now().UnixNano() % 1000000)
	blue, plain, green := "blue-"+sfx, "plain-"+sfx, "green-"+sfx
	blueLabels := map[string]string{"tenant-" + sfx: "blue"}
	namespaces := []*corev1.Namespace{
		{ObjectMeta: metav1.ObjectMeta{Name: blue, Labels: blueLabels}},
		{ObjectMeta: metav1.ObjectMeta{Name: plain}},
		{ObjectMeta: metav1.ObjectMeta{Name: green, Labels: map[string]string{"tenant-" + sfx: "green"}}},
	}
	poolBlue, poolExpr, poolAll := "pool-blue-"+sfx, "pool-expr-"+sfx, "pool-all-"+sfx
	namespaces[2].Annotations = map[string]string{jkev1.AnnotationIPPools: `["` + poolBlue + `"]`}
	for _, ns := range namespaces {
		if _, err := admin.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	pools := map[string]poolchoice.Pool{}
	for i, p := range []*jkev1.IPPool{
		{ObjectMeta: metav1.ObjectMeta{Name: poolBlue}, Spec: jkev1.IPPoolSpec{CIDRs: []string{"10.201.0.0/16"},
			NamespaceSelector: &metav1.LabelSelector{MatchLabels: blueLabels}}},
		{ObjectMeta: metav1.ObjectMeta{Name: poolExpr}, Spec: jkev1.IPPoolSpec{CIDRs: []string{"10.202.0.0/16"},
			NamespaceSelector: &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{
				{Key: "tenant-" + sfx, Operator: metav1.LabelSelectorOpIn, Values: []string{"blue", "red"}}}}}},
		{ObjectMeta: metav1.ObjectMeta{Name: poolAll}, Spec: jkev1.IPPoolSpec{CIDRs: []string{"10.203.0.0/16"}}},
	} {
		// No allocator runs here; a node selector no node matches keeps the pools inert anyway.
		p.Spec.NodeSelector = &metav1.LabelSelector{MatchLabels: map[string]string{"no-node-" + sfx: fmt.Sprint(i)}}
		got, err := jke.JkeV1().IPPools().Create(ctx, p, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = jke.JkeV1().IPPools().Delete(context.Background(), got.Name, metav1.DeleteOptions{}) })
		if pools[got.Name], err = poolchoiceapi.FromIPPool(got); err != nil {
			t.Fatal(err)
		}
	}
	nsOf := map[string]poolchoice.Namespace{}
	for _, ns := range namespaces {
		nsOf[ns.Name] = poolchoice.Namespace{Name: ns.Name, Labels: ns.Labels, Annotations: ns.Annotations}
	}
	pod := func(value string) *corev1.Pod {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{GenerateName: "p-"},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "example.invalid/c"}}}}
		if value != "" {
			p.Annotations = map[string]string{jkev1.AnnotationIPPools: value}
		}
		return p
	}
	create := func(ns, value string) error {
		_, err := admin.CoreV1().Pods(ns).Create(ctx, pod(value), metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		return err
	}
	// The policy and its parameters take effect a moment after they are created: wait (at most
	// 30s) until a pod naming a pool that does not select its namespace is refused.
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		if err := create(plain, `["`+poolBlue+`"]`); err != nil && strings.Contains(err.Error(), "does not select") {
			break
		}
	}
	q := func(names ...string) string { return `["` + strings.Join(names, `","`) + `"]` }
	for _, tc := range []struct {
		name, ns, value string
		wantErr         string // "" = admitted
	}{
		{name: "pool selecting the namespace by labels", ns: blue, value: q(poolBlue)},
		{name: "pool selecting the namespace by expression", ns: blue, value: q(poolExpr)},
		{name: "pool without namespaceSelector", ns: plain, value: q(poolAll)},
		{name: "two pools, both select", ns: blue, value: `[ "` + poolBlue + `" , "` + poolAll + `" ]`},
		{name: "no annotation anywhere", ns: plain},
		{name: "pool not selecting the namespace", ns: plain, value: q(poolBlue),
			wantErr: "the pod's staticip.jke.jdcloud.com/ippools " + q(poolBlue) + ": IPPool " + poolBlue + " does not select namespace " + plain},
		{name: "expression not matching", ns: green, value: q(poolExpr), wantErr: "IPPool " + poolExpr + " does not select namespace " + green},
		{name: "one of two not selecting", ns: plain, value: q(poolAll, poolBlue), wantErr: "IPPool " + poolBlue + " does not select"},
		{name: "namespace's annotation not selecting", ns: green,
			wantErr: "namespace " + green + "'s staticip.jke.jdcloud.com/ippools " + q(poolBlue) + ": IPPool " + poolBlue + " does not select namespace " + green},
		{name: "pod's annotation wins over its namespace's", ns: green, value: q(poolAll)},
		{name: "not a JSON list", ns: blue, value: poolBlue, wantErr: "must be a JSON list of 1 to 8 IPPool names"},
		{name: "escaped name", ns: plain, value: `["pool-blue\u002d` + sfx + `"]`, wantErr: "must be a JSON list"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := create(tc.ns, tc.value)
			if tc.wantErr == "" && err != nil {
				t.Fatalf("refused: %v", err)
			}
			if tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)) {
				t.Fatalf("got %v; want refusal containing %q", err, tc.wantErr)
			}
			// The Go rule agrees with admission.
			var ann map[string]string
			if tc.value != "" {
				ann = map[string]string{jkev1.AnnotationIPPools: tc.value}
			}
			_, cerr := poolchoice.Choose(ann, nsOf[tc.ns], pools, poolchoice.NamespacePools(pools))
			if (cerr == nil) != (err == nil) {
				t.Fatalf("admission says %v, poolchoice.Choose says %v", err, cerr)
			}
		})
	}
	// What CEL cannot say: a pool that does not exist (each pool is judged as a parameter of its
	// own). Admission lets the pod in; poolchoice.Choose, which the scheduler applies, refuses it.
	if err := create(blue, q("no-such-pool-"+sfx)); err != nil {
		t.Errorf("a pool that does not exist: refused at admission (%v); the policy file says it cannot be — update its comment", err)
	}
	if _, err := poolchoice.Choose(map[string]string{jkev1.AnnotationIPPools: q("no-such-pool-" + sfx)}, nsOf[blue], pools, nil); err == nil || !strings.Contains(err.Error(), "does not exist") {
		t.Errorf("poolchoice.Choose on a missing pool: %v", err)
	}
}
