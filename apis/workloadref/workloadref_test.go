package workloadref

import "testing"

func TestBelongs(t *testing.T) {
	owner := func(apiVersion, kind, name string) *Ref { r := FromOwner(apiVersion, kind, name); return &r }
	for _, tc := range []struct {
		name  string
		rec   Ref
		owner *Ref
		want  bool
	}{
		{"record of nobody yet", FromRecord("", "", ""), nil, true},
		{"record of nobody yet, any controller", FromRecord("", "", ""), owner("apps/v1", "StatefulSet", "web"), true},
		{"pod without controller", FromRecord("", "StatefulSet", "web"), nil, false},
		{"same workload, legacy record", FromRecord("", "StatefulSet", "web"), owner("apps/v1", "StatefulSet", "web"), true},
		{"same workload, group recorded", FromRecord("apps", "StatefulSet", "web"), owner("apps/v1", "StatefulSet", "web"), true},
		{"same workload, another version", FromRecord("jke.jdcloud.com", "EnhancedStatefulSet", "web"), owner("jke.jdcloud.com/v1beta1", "EnhancedStatefulSet", "web"), true},
		{"legacy EnhancedStatefulSet record", FromRecord("", "EnhancedStatefulSet", "web"), owner("jke.jdcloud.com/v1alpha1", "EnhancedStatefulSet", "web"), true},
		{"another name", FromRecord("", "StatefulSet", "web"), owner("apps/v1", "StatefulSet", "db"), false},
		{"another kind", FromRecord("", "EnhancedStatefulSet", "web"), owner("apps/v1", "StatefulSet", "web"), false},
		{"another group, legacy record", FromRecord("", "StatefulSet", "web"), owner("apps.kruise.io/v1beta1", "StatefulSet", "web"), false},
		{"another group, group recorded", FromRecord("apps.kruise.io", "StatefulSet", "web"), owner("apps/v1", "StatefulSet", "web"), false},
		{"another group's own record", FromRecord("apps.kruise.io", "StatefulSet", "web"), owner("apps.kruise.io/v1beta1", "StatefulSet", "web"), true},
		{"core group owner against apps record", FromRecord("", "StatefulSet", "web"), owner("v1", "StatefulSet", "web"), false},
		{"unknown kind without group: group not compared", FromRecord("", "Thing", "web"), owner("example.com/v1", "Thing", "web"), true},
		{"record without kind: name only", Ref{Name: "web"}, owner("apps/v1", "StatefulSet", "web"), true},
	} {
		if got := Belongs(tc.rec, tc.owner); got != tc.want {
			t.Errorf("%s: Belongs(%+v, %+v) = %v, want %v", tc.name, tc.rec, tc.owner, got, tc.want)
		}
	}
}

func TestFromOwnerAndString(t *testing.T) {
	for _, tc := range []struct{ apiVersion, want string }{
		{"apps/v1", "StatefulSet.apps web"},
		{"v1", "StatefulSet web"},
		{"apps.kruise.io/v1beta1", "StatefulSet.apps.kruise.io web"},
	} {
		if got := FromOwner(tc.apiVersion, "StatefulSet", "web").String(); got != tc.want {
			t.Errorf("FromOwner(%q).String() = %q, want %q", tc.apiVersion, got, tc.want)
		}
	}
}
