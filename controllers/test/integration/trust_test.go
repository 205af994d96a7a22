package integration

import (
	"strings"
	"testing"
	"time"

	jkev1alpha1 "github.com/staticip/staticip/apis/jke/v1alpha1"
	"github.com/staticip/staticip/apis/podip"
	ests "github.com/staticip/staticip/controllers/pkg/enhancedstatefulset"
)

// TestTemplateIPAddressIsNotCopied: an EnhancedStatefulSet whose template asks for an IP
// (written before manifests/admission refused it, or by an identity it trusts) does not get
// that IP onto its pods: the controller-manager creates them with an identity the pod policy
// trusts, so it copies the annotation only from the StaticIP record, and says so in a Warning
// Event on the set. With static IPs enabled the pod gets (and the record keeps) the IP the
// node gave it, not the template's; without, no IP annotation at all.
func TestTemplateIPAddressIsNotCopied(t *testing.T) {
	f := newFixture(t)
	f.startKubelet("node-a", 10*time.Millisecond, nil)
	f.startManager()
	const wanted = "10.250.1.201"
	ask := func(s *jkev1alpha1.EnhancedStatefulSet) {
		s.Spec.Template.Annotations = map[string]string{podip.AnnotationIPAddress: wanted}
	}
	f.createSet(newSet("sneaky", 1, ask))
	f.createSet(newSet("sneaky-sip", 1, enableStaticIP, ask))
	f.waitSettled("sneaky", time.Minute)
	f.waitSettled("sneaky-sip", time.Minute)
	pods := f.pods()
	if got, ok := pods[ests.PodName("sneaky", 0)].Annotations[podip.AnnotationIPAddress]; ok {
		t.Errorf("pod sneaky-0 carries %s=%s from its template", podip.AnnotationIPAddress, got)
	}
	sipPod := pods[ests.PodName("sneaky-sip", 0)]
	if got := sipPod.Annotations[podip.AnnotationIPAddress]; got == wanted || sipPod.Status.PodIP == wanted {
		t.Errorf("pod sneaky-sip-0 got the template's IP: annotation %q, pod IP %s", got, sipPod.Status.PodIP)
	}
	ips := f.recordedIPs("sneaky-sip", 1)
	if ips[ests.PodName("sneaky-sip", 0)] == wanted {
		t.Errorf("StaticIP sneaky-sip-0 records the template's IP %s", wanted)
	}
	for _, set := range []string{"sneaky", "sneaky-sip"} {
		if ev := f.gridEvents(set); !strings.Contains(ev, ests.ReasonTemplateIPAddressIgnored+":") || !strings.Contains(ev, wanted) {
			t.Errorf("no %s Event on %s naming %s: %s", ests.ReasonTemplateIPAddressIgnored, set, wanted, ev)
		}
	}
}
