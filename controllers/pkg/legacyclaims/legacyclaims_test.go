package legacyclaims

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"

	jkev1 "github.com/staticip/staticip/apis/jke/v1"
	jkev1alpha1 "github.com/staticip/staticip/apis/jke/v1alpha1"
	"github.com/staticip/staticip/internal/testenv"
	"github.com/staticip/staticip/internal/testsupport"
)

func TestMain(m *testing.M) { testenv.Main(m) }

func TestLegacy(t *testing.T) {
	for _, c := range []struct {
		name        string
		annotations map[string]string
		want        bool
	}{
		{"no report: no agent yet, or none at all", nil, false},
		{"a report without claims-in-status: an agent of the previous release", map[string]string{jkev1alpha1.AnnotationIPRangesObserved: `{"r":"n/0"}`}, true},
		{"a report with claims-in-status: a current agent", map[string]string{jkev1alpha1.AnnotationIPRangesObserved: `{"r":"n/0"}`, jkev1.AnnotationClaimsInStatus: "true"}, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := Legacy(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Annotations: c.annotations}}); got != c.want {
				t.Fatalf("Legacy = %v, want %v", got, c.want)
			}
		})
	}
}

// On a real API server: a Node whose agent reports in the annotation only is labelled; once
// its agent claims in status.holders the label goes; a Node without a report is never labelled.
func TestLabelFollowsTheAgentsProtocol(t *testing.T) {
	env := testenv.Get(t)
	ctx := testenv.Context(t, time.Minute)
	kube := kubernetes.NewForConfigOrDie(env.Config)
	suffix := fmt.Sprint(time.Now().UnixNano() % 1000000)
	old, plain := "legacy-old-"+suffix, "legacy-plain-"+suffix
	for _, name := range []string{old, plain} {
		if _, err := kube.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = kube.CoreV1().Nodes().Delete(context.Background(), name, metav1.DeleteOptions{}) })
	}
	f := informers.NewSharedInformerFactory(kube, 0)
	c, err := NewController(kube, f.Core().V1().Nodes())
	if err != nil {
		t.Fatal(err)
	}
	f.Start(ctx.Done())
	go c.Run(ctx, 1)
	annotate := func(kv string) {
		t.Helper()
		if _, err := kube.CoreV1().Nodes().Patch(ctx, old, types.MergePatchType, []byte(`{"metadata":{"annotations":{`+kv+`}}}`), metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	labelled := func(name string) func() bool {
		return func() bool {
			n, err := kube.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
			return err == nil && Labelled(n)
		}
	}
	annotate(`"` + jkev1alpha1.AnnotationIPRangesObserved + `":"{\"r\":\"` + old + `/0\"}"`)
	testsupport.Eventually(ctx, t, 30*time.Second, "the label on the Node of an old agent", testsupport.True(labelled(old)))
	annotate(`"` + jkev1.AnnotationClaimsInStatus + `":"true"`)
	testsupport.Eventually(ctx, t, 30*time.Second, "the label gone once its agent claims in status", testsupport.True(func() bool { return !labelled(old)() }))
	if labelled(plain)() {
		t.Errorf("node %s, which carries no report, was labelled", plain)
	}
}
