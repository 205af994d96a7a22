package manifests_test

import (
	"maps"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"

	rbacv1 "k8s.io/api/rbac/v1"
	"sigs.k8s.io/yaml"
)

// The trust model in cni/README.md ("Trust model: every identity") lists every service
// account of manifests/ and what RBAC grants it; this test computes the same from the RBAC
// objects under manifests/ and fails on any difference (a verb added without a row, a row
// describing a verb nobody grants). A role the manifests bind but do not define (Kubernetes'
// own, e.g. system:kube-scheduler) appears as "builtin <kind> <name>".
func TestTrustModelTableMatchesRBAC(t *testing.T) {
	want := rbacPermissions(t)
	got := readmeTable(t)
	for id, perms := range want {
		if g, ok := got[id]; !ok {
			t.Errorf("cni/README.md has no trust-model row for %s; RBAC grants it:\n| `%s` | %s |", id, id, strings.Join(perms, "; "))
		} else if !slices.Equal(g, perms) {
			t.Errorf("trust-model row of %s says\n  %s\nRBAC under manifests/ grants\n  %s", id, strings.Join(g, "; "), strings.Join(perms, "; "))
		}
	}
	for id := range got {
		if _, ok := want[id]; !ok {
			t.Errorf("cni/README.md lists %s, which no RBAC under manifests/ binds", id)
		}
	}
}

// rbacPermissions: service account (namespace/name) -> sorted permission strings.
func rbacPermissions(t *testing.T) map[string][]string {
	type role struct {
		ns    string
		rules []rbacv1.PolicyRule
	}
	roles := map[string]role{} // "ClusterRole/name" or "Role/ns/name"
	type binding struct {
		ns       string
		roleRef  rbacv1.RoleRef
		subjects []rbacv1.Subject
	}
	var bindings []binding
	for path, docs := range yamlDocs(t) {
		if strings.HasPrefix(path, "examples"+string(filepath.Separator)) {
			continue
		}
		for _, doc := range docs {
			var obj struct {
				Kind     string                           `json:"kind"`
				Metadata struct{ Name, Namespace string } `json:"metadata"`
				Rules    []rbacv1.PolicyRule              `json:"rules"`
				RoleRef  rbacv1.RoleRef                   `json:"roleRef"`
				Subjects []rbacv1.Subject                 `json:"subjects"`
			}
			if err := yaml.Unmarshal(doc, &obj); err != nil {
				continue
			}
			switch obj.Kind {
			case "ClusterRole":
				roles["ClusterRole/"+obj.Metadata.Name] = role{rules: obj.Rules}
			case "Role":
				roles["Role/"+obj.Metadata.Namespace+"/"+obj.Metadata.Name] = role{ns: obj.Metadata.Namespace, rules: obj.Rules}
			case "ClusterRoleBinding", "RoleBinding":
				bindings = append(bindings, binding{ns: obj.Metadata.Namespace, roleRef: obj.RoleRef, subjects: obj.Subjects})
			}
		}
	}
	// id -> scoped resource -> verbs (the union over every role bound to id)
	perms := map[string]map[string]map[string]bool{}
	grant := func(id, what string, verbs ...string) {
		if perms[id] == nil {
			perms[id] = map[string]map[string]bool{}
		}
		if perms[id][what] == nil {
			perms[id][what] = map[string]bool{}
		}
		for _, v := range verbs {
			perms[id][what][v] = true
		}
	}
	for _, b := range bindings {
		key := "ClusterRole/" + b.roleRef.Name
		scope := ""
		if b.roleRef.Kind == "Role" {
			key = "Role/" + b.ns + "/" + b.roleRef.Name
		}
		if b.ns != "" {
			scope = b.ns + ": "
		}
		for _, s := range b.subjects {
			if s.Kind != rbacv1.ServiceAccountKind {
				continue
			}
			id := s.Namespace + "/" + s.Name
			r, ok := roles[key]
			if !ok {
				grant(id, scope+"builtin "+b.roleRef.Kind+" "+b.roleRef.Name)
				continue
			}
			for _, rule := range r.rules {
				for _, u := range rule.NonResourceURLs {
					grant(id, scope+u, rule.Verbs...)
				}
				for _, g := range rule.APIGroups {
					for _, res := range rule.Resources {
						name := res
						if g != "" {
							name = g + "/" + res
						}
						if len(rule.ResourceNames) > 0 {
							name += "[" + strings.Join(rule.ResourceNames, ",") + "]"
						}
						grant(id, scope+name, rule.Verbs...)
					}
				}
			}
		}
	}
	out := map[string][]string{}
	for id, whats := range perms {
		for what, verbs := range whats {
			p := what
			if len(verbs) > 0 {
				vs := slices.Sorted(maps.Keys(verbs))
				p += ": " + strings.Join(vs, ",")
			}
			out[id] = append(out[id], p)
		}
		sort.Strings(out[id])
	}
	return out
}

// readmeTable reads the rows of the trust-model table: identity -> sorted permissions (the
// second column, entries separated by "; ", each in backquotes).
func readmeTable(t *testing.T) map[string][]string {
	data, err := os.ReadFile(filepath.Join("..", "cni", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	const heading = "### Trust model: every identity"
	_, section, ok := strings.Cut(string(data), heading)
	if !ok {
		t.Fatalf("cni/README.md has no section %q", heading)
	}
	out := map[string][]string{}
	for _, line := range strings.Split(section, "\n") {
		if strings.HasPrefix(line, "### ") || strings.HasPrefix(line, "## ") {
			break
		}
		cells := strings.Split(line, "|")
		if len(cells) < 4 || !strings.HasPrefix(strings.TrimSpace(cells[1]), "`") {
			continue
		}
		id := strings.Trim(strings.TrimSpace(cells[1]), "`")
		var perms []string
		for _, p := range strings.Split(cells[2], ";") {
			if p = strings.Trim(strings.TrimSpace(p), "`"); p != "" {
				perms = append(perms, p)
			}
		}
		sort.Strings(perms)
		out[id] = perms
	}
	if len(out) == 0 {
		t.Fatalf("no rows under %q in cni/README.md", heading)
	}
	return out
}
