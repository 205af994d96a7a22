package enhancedstatefulset

import (
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	k8stesting "k8s.io/client-go/testing"

	jkefake "github.com/staticip/staticip/apis/generated/clientset/versioned/fake"
	jkev1 "github.com/staticip/staticip/apis/jke/v1"
	jkev1alpha1 "github.com/staticip/staticip/apis/jke/v1alpha1"
	"github.com/staticip/staticip/apis/podip"
)

// preclaimFixture is the stale-cache fixture with static IPs on: web-1 has StaticIP
// 10.0.0.11, kept for the set, and is being deleted.
type preclaimFixture struct {
	*staleCacheFixture
	jke  *jkefake.Clientset
	sips interface{ Update(any) error }
	now  time.Time
}

func newPreclaimFixture(t *testing.T) *preclaimFixture {
	t.Helper()
	base := newStaleCacheFixture(t, 0, 1, 2)
	f := &preclaimFixture{staleCacheFixture: base, jke: base.c.client.(*jkefake.Clientset), now: time.Date(2026, 11, 26, 12, 0, 0, 0, time.UTC)}
	f.c.now = func() time.Time { return f.now }
	set, err := f.c.setLister.EnhancedStatefulSets("ns").Get("web")
	if err != nil {
		t.Fatal(err)
	}
	set = set.DeepCopy()
	set.Annotations = map[string]string{jkev1.AnnotationEnable: "true"}
	if err := f.setCache.Update(set); err != nil {
		t.Fatal(err)
	}
	sip := &jkev1.StaticIP{
		ObjectMeta: metav1.ObjectMeta{Name: "web-1", Namespace: "ns", UID: "sip-1", ResourceVersion: "5"},
		Spec:       jkev1.StaticIPSpec{IP: "10.0.0.11", Node: "node-1", Pod: "web-1", APIGroup: jkev1alpha1.GroupName, Kind: "EnhancedStatefulSet", Ref: "web"},
		Status:     jkev1.StaticIPStatus{Phase: jkev1.StaticIPBound},
	}
	if err := f.jke.Tracker().Add(sip); err != nil {
		t.Fatal(err)
	}
	f.sips = f.sipCache
	if err := f.sips.Update(sip); err != nil {
		t.Fatal(err)
	}
	// web-1 is being deleted (not by the set).
	pod := f.pods["web-1"].DeepCopy()
	pod.DeletionTimestamp = &metav1.Time{Time: f.now}
	if err := f.podCache.(interface{ Update(any) error }).Update(pod); err != nil {
		t.Fatal(err)
	}
	f.pods["web-1"] = pod
	return f
}

// staticIPWrites lists the StaticIP writes sent to the API server, in order.
func (f *preclaimFixture) staticIPWrites() []string {
	var out []string
	for _, a := range f.jke.Actions() {
		if a.GetResource().Resource != "staticips" {
			continue
		}
		switch a := a.(type) {
		case k8stesting.UpdateAction:
			out = append(out, "update "+a.GetObject().(*jkev1.StaticIP).Name)
		case k8stesting.CreateAction:
			out = append(out, "create "+a.GetObject().(*jkev1.StaticIP).Name)
		}
	}
	return out
}

// gone removes web-1 from the cache; the cache then shows StaticIP web-1 as the claim left it.
func (f *preclaimFixture) gone(t *testing.T) {
	t.Helper()
	if err := f.podCache.Delete(f.pods["web-1"]); err != nil {
		t.Fatal(err)
	}
	claimed, err := f.jke.Tracker().Get(jkev1.SchemeGroupVersion.WithResource("staticips"), "ns", "web-1")
	if err != nil {
		t.Fatal(err)
	}
	if err := f.sips.Update(claimed); err != nil {
		t.Fatal(err)
	}
}

// createdWeb1 is the pod the set created for ordinal 1.
func (f *preclaimFixture) createdWeb1(t *testing.T) *corev1.Pod {
	t.Helper()
	for _, a := range f.kube.Actions() {
		if c, ok := a.(k8stesting.CreateAction); ok && a.GetResource().Resource == "pods" {
			if p := c.GetObject().(*corev1.Pod); p.Name == "web-1" {
				return p
			}
		}
	}
	t.Fatalf("web-1 was not created; pod writes %v", f.podWrites())
	return nil
}

// TestStaticIPClaimedWhileThePodTerminates: the record of a static-IP pod being deleted is
// claimed while it terminates — once, however many syncs its events cause — and the create
// after it is gone is the only write: the successor gets the record's IP without a second
// claim.
func TestStaticIPClaimedWhileThePodTerminates(t *testing.T) {
	f := newPreclaimFixture(t)
	f.sync(t)
	f.sync(t)
	if got := fmt.Sprint(f.staticIPWrites()); got != "[update web-1]" {
		t.Fatalf("syncs while web-1 terminates: StaticIP writes %s, want one claim [update web-1]", got)
	}
	f.gone(t)
	f.now = f.now.Add(2 * time.Second)
	f.sync(t)
	pod := f.createdWeb1(t)
	if got := pod.Annotations[podip.AnnotationIPAddress]; got != "10.0.0.11" {
		t.Errorf("successor's %s = %q, want the record's 10.0.0.11", podip.AnnotationIPAddress, got)
	}
	if got := fmt.Sprint(f.staticIPWrites()); got != "[update web-1]" {
		t.Errorf("after the create: StaticIP writes %s, want only the early claim [update web-1]", got)
	}
}

// TestEarlyClaimNotUsedWhenTheRecordChanged: the create claims again when the early claim
// no longer stands — the record was replaced (another UID), marked Released, or the claim is
// older than preclaimTTL. A Released record is never put on the new pod.
func TestEarlyClaimNotUsedWhenTheRecordChanged(t *testing.T) {
	cases := []struct {
		name       string
		change     func(f *preclaimFixture, sip *jkev1.StaticIP)
		wantWrites string
		wantCreate bool
	}{
		{"record replaced", func(f *preclaimFixture, sip *jkev1.StaticIP) { sip.UID = types.UID("sip-1-new") },
			"[update web-1 update web-1]", true},
		{"claim expired", func(f *preclaimFixture, sip *jkev1.StaticIP) { f.now = f.now.Add(preclaimTTL) },
			"[update web-1 update web-1]", true},
		{"record released", func(f *preclaimFixture, sip *jkev1.StaticIP) { sip.Status.Phase = jkev1.StaticIPReleased },
			"[update web-1]", false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f := newPreclaimFixture(t)
			f.sync(t)
			f.gone(t)
			obj, err := f.jke.Tracker().Get(jkev1.SchemeGroupVersion.WithResource("staticips"), "ns", "web-1")
			if err != nil {
				t.Fatal(err)
			}
			sip := obj.(*jkev1.StaticIP).DeepCopy()
			tc.change(f, sip)
			if err := f.jke.Tracker().Update(jkev1.SchemeGroupVersion.WithResource("staticips"), sip, "ns"); err != nil {
				t.Fatal(err)
			}
			if err := f.sips.Update(sip); err != nil {
				t.Fatal(err)
			}
			_, _ = f.c.sync(t.Context(), "ns/web") // a Released record is an error the queue retries
			if got := fmt.Sprint(f.staticIPWrites()); got != tc.wantWrites {
				t.Errorf("StaticIP writes %s, want %s", got, tc.wantWrites)
			}
			created := false
			for _, w := range f.podWrites() {
				created = created || w == "create web-1"
			}
			if created != tc.wantCreate {
				t.Errorf("web-1 created: %v, want %v (pod writes %v)", created, tc.wantCreate, f.podWrites())
			}
		})
	}
}
