package staticip

import (
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"

	jkev1 "github.com/staticip/staticip/apis/jke/v1"
	"github.com/staticip/staticip/apis/podip"
)

// podAddresses are the addresses a pod runs with: status.podIPs (a dual-stack pod's two, the
// kubelet's primary first), else status.podIP. A value that is not one address or one per
// family (a kubelet never reports one) counts as none.
func podAddresses(pod *corev1.Pod) podip.Addresses {
	ips := make([]string, 0, len(pod.Status.PodIPs))
	for _, p := range pod.Status.PodIPs {
		ips = append(ips, p.IP)
	}
	if len(ips) == 0 && pod.Status.PodIP != "" {
		ips = append(ips, pod.Status.PodIP)
	}
	a, err := podip.ParseAddresses(strings.Join(ips, ","))
	if err != nil {
		return podip.Addresses{}
	}
	return a
}

// recordAddresses decides what a StaticIP records of a live pod's addresses. rec is what it
// records now (zero: no IP yet), pod what the pod runs with. The record's addresses, once set,
// are the truth per family: an address of a family the record names that differs from it is a
// mismatch (for a human or the CNI to resolve, never a silent rewrite). A record with no IP
// takes the pod's addresses; a single-stack record whose address the pod holds gains the pod's
// address of the other family (a pool of that family added to the node later); a family the pod
// lacks is never dropped from the record (its address stays the pod's).
func recordAddresses(rec, pod podip.Addresses) (next podip.Addresses, mismatch string) {
	if !rec.IsValid() {
		return pod, ""
	}
	var differ []string
	for _, want := range rec.List() {
		if got := pod.Of(podip.Family(want)); got.IsValid() && got != want {
			differ = append(differ, fmt.Sprintf("IPv%d %s, recorded %s", podip.Family(want), got, want))
		}
	}
	if len(differ) > 0 {
		return rec, strings.Join(differ, ", ")
	}
	if !rec.Secondary.IsValid() && pod.Of(podip.Family(rec.Primary)) == rec.Primary {
		for _, ip := range pod.List() {
			if podip.Family(ip) != podip.Family(rec.Primary) {
				return podip.Addresses{Primary: rec.Primary, Secondary: ip}, ""
			}
		}
	}
	return rec, ""
}

// setAddresses writes a into the record's spec: ip the primary, ips both when it has two.
func setAddresses(spec *jkev1.StaticIPSpec, a podip.Addresses) {
	spec.IP = a.Primary.String()
	spec.IPs = nil
	if a.Secondary.IsValid() {
		spec.IPs = []string{a.Primary.String(), a.Secondary.String()}
	}
}

// addressKeys are a record's addresses as the IP index keys them: each address of spec.ips, else
// spec.ip as written (an unparsable one too, so that two records with the same odd value are
// still found together).
func addressKeys(s *jkev1.StaticIP) []string {
	if a := s.Spec.ParsedAddresses(); a.IsValid() {
		keys := make([]string, 0, 2)
		for _, ip := range a.List() {
			keys = append(keys, ip.String())
		}
		return keys
	}
	if s.Spec.IP != "" {
		return []string{s.Spec.IP}
	}
	return nil
}
