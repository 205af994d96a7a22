package ownwrites

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

func cm(rv string, uid types.UID, data string) *corev1.ConfigMap {
	return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "a", ResourceVersion: rv, UID: uid}, Data: map[string]string{"v": data}}
}

// TestView: which copy a view gives, for each way the cache and a remembered write relate.
func TestView(t *testing.T) {
	for _, tc := range []struct {
		name     string
		written  *corev1.ConfigMap // nil: nothing remembered
		cached   *corev1.ConfigMap
		age      time.Duration // since the write
		want     string
		keepsOne bool // the entry is still remembered after the view
	}{
		{name: "nothing written", cached: cm("5", "u", "cache"), want: "cache"},
		{name: "the cache one write behind", written: cm("7", "u", "written"), cached: cm("5", "u", "cache"), want: "written", keepsOne: true},
		{name: "the cache shows the write", written: cm("7", "u", "written"), cached: cm("7", "u", "cache"), want: "cache"},
		{name: "the cache past the write (someone wrote after)", written: cm("7", "u", "written"), cached: cm("9", "u", "cache"), want: "cache"},
		{name: "versions compared as integers, not strings", written: cm("10", "u", "written"), cached: cm("9", "u", "cache"), want: "written", keepsOne: true},
		{name: "an expired write", written: cm("7", "u", "written"), cached: cm("5", "u", "cache"), age: 2 * time.Minute, want: "cache"},
		{name: "deleted and made again", written: cm("7", "u", "written"), cached: cm("5", "other", "cache"), want: "cache"},
		{name: "a version that is not an integer", written: cm("7", "u", "written"), cached: cm("x5", "u", "cache"), want: "cache"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			now := time.Unix(1000, 0)
			o := New[*corev1.ConfigMap](time.Minute, func() time.Time { return now })
			if tc.written != nil {
				o.Remember("a", tc.written)
			}
			now = now.Add(tc.age)
			if got := o.View("a", tc.cached).Data["v"]; got != tc.want {
				t.Errorf("View gave the %s copy, want the %s one", got, tc.want)
			}
			if kept := o.Len() == 1; kept != tc.keepsOne {
				t.Errorf("remembered after the view: %v, want %v", kept, tc.keepsOne)
			}
		})
	}
}

// TestRememberKeepsTheLatestWrite: an answer that arrives after a later write's does not
// replace it; expired entries of keys never viewed again are dropped by later writes.
func TestRememberKeepsTheLatestWrite(t *testing.T) {
	now := time.Unix(1000, 0)
	o := New[*corev1.ConfigMap](time.Minute, func() time.Time { return now })
	o.Remember("a", cm("9", "u", "later"))
	o.Remember("a", cm("8", "u", "earlier"))
	if got := o.View("a", cm("5", "u", "cache")).Data["v"]; got != "later" {
		t.Errorf("View gave %s, want the later write", got)
	}
	o.Remember("b", cm("3", "u", "b"))
	now = now.Add(2 * time.Minute)
	o.Remember("c", cm("4", "u", "c"))
	if o.Len() != 1 {
		t.Errorf("%d entries remembered after the others expired, want 1 (c)", o.Len())
	}
	o.Forget("c")
	if o.Len() != 0 {
		t.Errorf("%d entries after Forget, want 0", o.Len())
	}
}

// TestUnseen: created objects the cache does not hold yet are listed until they expire;
// those the cache holds are left to View.
func TestUnseen(t *testing.T) {
	now := time.Unix(1000, 0)
	o := New[*corev1.ConfigMap](time.Minute, func() time.Time { return now })
	created := cm("7", "u", "created")
	created.Name = "new"
	o.Remember("new", created)
	o.Remember("a", cm("8", "u", "written"))
	inCache := func(k string) bool { return k == "a" }
	if got := o.Unseen(inCache); len(got) != 1 || got[0].Name != "new" {
		t.Errorf("Unseen = %v, want the created object only", got)
	}
	now = now.Add(2 * time.Minute)
	if got := o.Unseen(inCache); len(got) != 0 {
		t.Errorf("Unseen after the TTL = %v, want none", got)
	}
	if o.Len() != 0 { // every expired entry goes, "a" too
		t.Errorf("%d remembered after the TTL, want 0", o.Len())
	}
}
