package main

import (
	"bytes"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	jkev1alpha1 "github.com/staticip/staticip/apis/jke/v1alpha1"
)

func pod(name, set, uid, node, ip string, phase corev1.PodPhase, ready bool) *corev1.Pod {
	st := corev1.ConditionFalse
	if ready {
		st = corev1.ConditionTrue
	}
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, UID: types.UID(uid), Labels: map[string]string{setLabel: set}},
		Spec:   corev1.PodSpec{NodeName: node},
		Status: corev1.PodStatus{Phase: phase, PodIP: ip, Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: st}}}}
}

func deleting(p *corev1.Pod) *corev1.Pod {
	now := metav1.Now()
	p.DeletionTimestamp = &now
	return p
}

func TestMovedWithIPs(t *testing.T) {
	ips := map[string]string{"ests-0": "10.0.0.5", "ests-1": "10.0.0.6"}
	for _, tc := range []struct {
		name string
		pods []*corev1.Pod
		want bool
	}{
		{"both on the spare with their IPs", []*corev1.Pod{pod("ests-0", nameESTS, "a", "spare", "10.0.0.5", corev1.PodRunning, false), pod("ests-1", nameESTS, "b", "spare", "10.0.0.6", corev1.PodRunning, true)}, true},
		{"one still pending", []*corev1.Pod{pod("ests-0", nameESTS, "a", "spare", "10.0.0.5", corev1.PodRunning, true), pod("ests-1", nameESTS, "b", "spare", "", corev1.PodPending, false)}, false},
		{"one with another IP", []*corev1.Pod{pod("ests-0", nameESTS, "a", "spare", "10.0.0.5", corev1.PodRunning, true), pod("ests-1", nameESTS, "b", "spare", "10.0.0.9", corev1.PodRunning, true)}, false},
		{"one still on the failed node", []*corev1.Pod{pod("ests-0", nameESTS, "a", "spare", "10.0.0.5", corev1.PodRunning, true), pod("ests-1", nameESTS, "b", "n3", "10.0.0.6", corev1.PodRunning, true)}, false},
		{"one deleting", []*corev1.Pod{pod("ests-0", nameESTS, "a", "spare", "10.0.0.5", corev1.PodRunning, true), deleting(pod("ests-1", nameESTS, "b", "spare", "10.0.0.6", corev1.PodRunning, true))}, false},
	} {
		if got := MovedWithIPs(tc.pods, ips, "spare"); got != tc.want {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
	}
}

func TestNativeBack(t *testing.T) {
	before := []*corev1.Pod{pod("native-0", nameNative, "old0", "n3", "10.0.0.1", corev1.PodRunning, true), pod("native-1", nameNative, "old1", "n3", "10.0.0.2", corev1.PodRunning, true)}
	for _, tc := range []struct {
		name string
		pods []*corev1.Pod
		want bool
	}{
		{"both recreated elsewhere", []*corev1.Pod{pod("native-0", nameNative, "new0", "n1", "10.0.1.1", corev1.PodRunning, true), pod("native-1", nameNative, "new1", "n2", "10.0.2.1", corev1.PodRunning, true)}, true},
		{"an old pod object remains", []*corev1.Pod{pod("native-0", nameNative, "new0", "n1", "10.0.1.1", corev1.PodRunning, true), deleting(before[1])}, false},
		{"the old one still listed", []*corev1.Pod{pod("native-0", nameNative, "new0", "n1", "10.0.1.1", corev1.PodRunning, true), before[1]}, false},
		{"one pending", []*corev1.Pod{pod("native-0", nameNative, "new0", "n1", "10.0.1.1", corev1.PodRunning, true), pod("native-1", nameNative, "new1", "n2", "", corev1.PodPending, false)}, false},
		{"ests pods do not count", []*corev1.Pod{pod("native-0", nameNative, "new0", "n1", "10.0.1.1", corev1.PodRunning, true), pod("ests-1", nameESTS, "e1", "spare", "10.0.0.2", corev1.PodRunning, true)}, false},
	} {
		if got := NativeBack(tc.pods, before, nameNative, "n3", 2); got != tc.want {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
	}
}

func TestAllReadyOn(t *testing.T) {
	pods := []*corev1.Pod{pod("a", nameESTS, "1", "n3", "10.0.0.1", corev1.PodRunning, true), pod("b", nameNative, "2", "n3", "10.0.0.2", corev1.PodRunning, true)}
	if !AllReadyOn(pods, "n3", 2) {
		t.Error("two Ready pods on n3: want true")
	}
	if AllReadyOn(pods, "n3", 3) || AllReadyOn(append(pods, pod("c", nameNative, "3", "n1", "10.0.0.3", corev1.PodRunning, true)), "n3", 3) {
		t.Error("a pod missing or elsewhere: want false")
	}
}

func TestPrintTable(t *testing.T) {
	var b bytes.Buffer
	PrintTable(&b, []Round{
		{N: 1, ESTS: 10 * time.Second, Native: 30 * time.Second, NotReady: 40 * time.Second, Phases: map[jkev1alpha1.NodeFailoverPhase]time.Duration{jkev1alpha1.FailoverStaticIPsRebound: 9 * time.Second}},
		{N: 2, ESTS: 20 * time.Second, Native: 30 * time.Second, NotReady: 40 * time.Second, Phases: map[jkev1alpha1.NodeFailoverPhase]time.Duration{}},
		{N: 3, ESTS: 12 * time.Second, Native: 36 * time.Second, NotReady: 42 * time.Second, Phases: map[jkev1alpha1.NodeFailoverPhase]time.Duration{jkev1alpha1.FailoverStaticIPsRebound: 11 * time.Second}},
	})
	lines := strings.Split(strings.TrimSpace(b.String()), "\n")
	if len(lines) != 5 {
		t.Fatalf("want header, 3 rounds, median:\n%s", b.String())
	}
	if f := strings.Fields(lines[4]); f[0] != "median" || f[1] != "12.0" || f[2] != "30.0" || f[3] != "2.50" || f[len(f)-1] != "10.0" {
		t.Errorf("median row %q", lines[4])
	}
}

func TestHeldTwice(t *testing.T) {
	mk := func(uid, name, ip string, mod func(*corev1.Pod)) *corev1.Pod {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{UID: types.UID(uid), Namespace: "ns", Name: name}}
		if ip != "" {
			p.Status.PodIPs = []corev1.PodIP{{IP: ip}}
		}
		if mod != nil {
			mod(p)
		}
		return p
	}
	deleting := func(p *corev1.Pod) { p.DeletionTimestamp = &metav1.Time{} }
	for _, c := range []struct {
		name string
		pods []*corev1.Pod
		want []string
	}{
		{"distinct IPs", []*corev1.Pod{mk("1", "a", "10.0.0.1", nil), mk("2", "b", "10.0.0.2", nil)}, nil},
		{"one IP on two pods", []*corev1.Pod{mk("1", "a", "10.0.0.1", nil), mk("2", "b", "10.0.0.1", nil)}, []string{"10.0.0.1: ns/a, ns/b"}},
		{"a pod being deleted still holds its IP", []*corev1.Pod{mk("1", "a", "10.0.0.1", deleting), mk("2", "b", "10.0.0.1", nil)}, []string{"10.0.0.1: ns/a, ns/b"}},
		{"a finished pod holds nothing", []*corev1.Pod{mk("1", "a", "10.0.0.1", func(p *corev1.Pod) { p.Status.Phase = corev1.PodSucceeded }), mk("2", "b", "10.0.0.1", nil)}, nil},
		{"host-network pods share the node's address", []*corev1.Pod{mk("1", "a", "172.30.0.11", func(p *corev1.Pod) { p.Spec.HostNetwork = true }), mk("2", "b", "172.30.0.11", func(p *corev1.Pod) { p.Spec.HostNetwork = true })}, nil},
		{"no IP yet", []*corev1.Pod{mk("1", "a", "", nil), mk("2", "b", "", nil)}, nil},
	} {
		m := map[types.UID]*corev1.Pod{}
		for _, p := range c.pods {
			m[p.UID] = p
		}
		if got := HeldTwice(m); !slices.Equal(got, c.want) {
			t.Errorf("%s: %v, want %v", c.name, got, c.want)
		}
	}
}
