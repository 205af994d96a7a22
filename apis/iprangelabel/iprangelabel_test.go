package iprangelabel

import (
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"

	jkev1 "github.com/staticip/staticip/apis/jke/v1"
)

func TestValue(t *testing.T) {
	long := strings.Repeat("a", 64)
	for _, tt := range []struct{ name, want string }{
		{"node-1", "node-1"},
		{"default-10-244-1-0-24", "default-10-244-1-0-24"},
		{"p.with.dots", "p.with.dots"},
		{strings.Repeat("a", 63), strings.Repeat("a", 63)},
	} {
		if got := Value(tt.name); got != tt.want {
			t.Errorf("Value(%q) = %q, want %q", tt.name, got, tt.want)
		}
	}
	h := Value(long)
	if !strings.HasPrefix(h, hashPrefix) || len(validation.IsValidLabelValue(h)) != 0 || h == Value(long+"b") || h != Value(long) {
		t.Errorf("Value of a 64-character name = %q: want a stable, distinct, valid label value", h)
	}
}

func TestFor(t *testing.T) {
	at := func(name, cidr string, age time.Duration) *jkev1.IPRange {
		return &jkev1.IPRange{ObjectMeta: metav1.ObjectMeta{Name: name, CreationTimestamp: metav1.NewTime(time.Unix(1e9, 0).Add(-age))},
			Spec: jkev1.IPRangeSpec{CIDR: cidr}}
	}
	deleting := at("gone", "10.9.0.0/24", time.Hour)
	deleting.DeletionTimestamp = &metav1.Time{Time: time.Now()}
	ranges := []*jkev1.IPRange{at("a", "10.1.0.0/24", time.Minute), at("wide", "10.1.0.0/16", time.Second),
		at("b", "10.2.0.0/24", time.Minute), at("b2", "10.2.0.0/24", time.Minute), at("bad", "nope", time.Hour), deleting,
		at("v6", "fd00::/120", time.Minute)}
	for _, tt := range []struct{ ip, want string }{
		{"10.1.0.5", "a"},    // in a and in the younger wide: the older wins
		{"10.1.7.5", "wide"}, // only in wide
		{"10.2.0.5", "b"},    // equal age: the name decides
		{"10.9.0.5", ""},     // only in a range being deleted
		{"10.3.0.1", ""},     // in no range
		{"", ""},             // no IP yet
		{"not-an-ip", ""},    // does not parse
		{"::ffff:10.1.0.5", "a"},
		{"fd00::5", "v6"},
	} {
		if got := For(ranges, tt.ip); got != tt.want {
			t.Errorf("For(%q) = %q, want %q", tt.ip, got, tt.want)
		}
	}
}
