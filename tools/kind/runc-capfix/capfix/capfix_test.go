package capfix

import (
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

func TestMissingFromBoundingSet(t *testing.T) {
	for _, tc := range []struct {
		name, status string
		want         []string
	}{
		{"full set", "Name:\tx\nCapBnd:\t000001ffffffffff\n", nil},
		{"this machine: no CAP_SYS_RESOURCE", "CapBnd:\t000001fffeffffff\n", []string{"CAP_SYS_RESOURCE"}},
		{"no CAP_SYS_ADMIN nor CAP_BPF", "CapBnd:\t0000007fffdfffff\n", []string{"CAP_SYS_ADMIN", "CAP_BPF", "CAP_CHECKPOINT_RESTORE"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := MissingFromBoundingSet(tc.status)
			if err != nil {
				t.Fatal(err)
			}
			var names []string
			for n := range got {
				names = append(names, n)
			}
			if len(names) != len(tc.want) {
				t.Fatalf("missing = %v, want %v", names, tc.want)
			}
			for _, w := range tc.want {
				if !got[w] {
					t.Fatalf("missing = %v, want %v", names, tc.want)
				}
			}
		})
	}
	if _, err := MissingFromBoundingSet("Name:\tx\n"); err == nil {
		t.Fatal("no CapBnd line: want an error")
	}
}

func TestSpecFiles(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want []string
	}{
		{[]string{"--root", "/run/runc", "create", "--bundle", "/b", "--pid-file", "/p", "id"}, []string{"/b/config.json"}},
		{[]string{"--log=/l", "run", "-b=/b2", "id"}, []string{"/b2/config.json"}},
		{[]string{"create", "id"}, []string{"config.json"}},
		{[]string{"--root", "/r", "exec", "--process", "/tmp/p.json", "--detach", "id"}, []string{"/tmp/p.json"}},
		{[]string{"exec", "id", "ls"}, nil},
		{[]string{"--root", "/r", "start", "id"}, nil},
		{[]string{"--root", "/r", "delete", "--force", "id"}, nil},
	} {
		if got := SpecFiles(tc.args); !reflect.DeepEqual(got, tc.want) {
			t.Errorf("SpecFiles(%q) = %q, want %q", tc.args, got, tc.want)
		}
	}
}

func TestRewriteFile(t *testing.T) {
	missing := map[string]bool{"CAP_SYS_RESOURCE": true}
	dir := t.TempDir()
	spec := filepath.Join(dir, "config.json")
	// A privileged container's spec; the memory limit is above 2^53 and must survive.
	in := `{"ociVersion":"1.0.2","process":{"capabilities":{"bounding":["CAP_CHOWN","CAP_SYS_RESOURCE"],"effective":["CAP_SYS_RESOURCE"],"permitted":["CAP_CHOWN","CAP_SYS_RESOURCE"]}},"linux":{"resources":{"memory":{"limit":9223372036854771712}}}}`
	if err := os.WriteFile(spec, []byte(in), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := RewriteFile(spec, missing); err != nil {
		t.Fatal(err)
	}
	out, _ := os.ReadFile(spec)
	if strings.Contains(string(out), "CAP_SYS_RESOURCE") || !strings.Contains(string(out), "9223372036854771712") {
		t.Fatalf("rewritten spec = %s", out)
	}
	var doc struct {
		Process struct {
			Capabilities map[string][]string `json:"capabilities"`
		} `json:"process"`
	}
	if err := json.Unmarshal(out, &doc); err != nil {
		t.Fatal(err)
	}
	if got := doc.Process.Capabilities["bounding"]; !reflect.DeepEqual(got, []string{"CAP_CHOWN"}) {
		t.Fatalf("bounding = %v", got)
	}
	if st, _ := os.Stat(spec); st.Mode().Perm() != 0o600 {
		t.Fatalf("mode changed to %v", st.Mode())
	}

	// An exec's process file holds the capabilities at the top level.
	proc := filepath.Join(dir, "process.json")
	os.WriteFile(proc, []byte(`{"args":["sh"],"capabilities":{"bounding":["CAP_SYS_RESOURCE","CAP_KILL"]}}`), 0o600)
	if err := RewriteFile(proc, missing); err != nil {
		t.Fatal(err)
	}
	if out, _ := os.ReadFile(proc); strings.Contains(string(out), "CAP_SYS_RESOURCE") || !strings.Contains(string(out), "CAP_KILL") {
		t.Fatalf("rewritten process = %s", out)
	}

	// Nothing to drop: the file is left byte for byte.
	plain := filepath.Join(dir, "plain.json")
	os.WriteFile(plain, []byte(`{ "process": {"capabilities": {"bounding": ["CAP_KILL"]}} }`), 0o600)
	RewriteFile(plain, missing)
	if out, _ := os.ReadFile(plain); string(out) != `{ "process": {"capabilities": {"bounding": ["CAP_KILL"]}} }` {
		t.Fatalf("untouched file changed: %s", out)
	}
}
