package plugin

import (
	"testing"

	jkev1 "github.com/staticip/staticip/apis/jke/v1"
)

// The plugin copies the enable key to avoid linking the API types; it must not drift. (The
// ip-address key is not copied: it is podip's one constant.)
func TestContractKeysMatchTheAPI(t *testing.T) {
	if AnnotationEnable != jkev1.AnnotationEnable {
		t.Fatalf("annotation keys drifted from apis/jke/v1")
	}
}

func TestLoadConfDefaultsAndDurations(t *testing.T) {
	c, err := LoadConf([]byte(`{"cniVersion":"1.1.0","name":"n","type":"staticip","quarantine":2.5,"ranges":[{"subnet":"10.0.0.0/24"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	if c.DataDir != DefaultDataDir || c.MTU != DefaultMTU || c.quarantine().Seconds() != 2.5 || c.DBPath() != "/var/lib/staticip/n/ipam.db" {
		t.Fatalf("%+v", c)
	}
	for _, bad := range []string{
		`{"name":"n","dataDir":"relative"}`,
		`{"name":"n","mtu":70000}`,
		`{"name":"n","quarantine":"soon"}`,
		`{"name":"../etc"}`,
		`{}`,
	} {
		if _, err := LoadConf([]byte(bad)); err == nil {
			t.Errorf("accepted %s", bad)
		}
	}
	// Bad ranges do not fail the conflist (DEL, CHECK, GC work without them); ADD refuses.
	for _, bad := range []string{
		`{"name":"n","ranges":[{"subnet":"10.0.0.0/24"},{"subnet":"10.0.0.128/25"}]}`,
		`{"name":"n","ranges":[{"subnet":"10.0.0.0/24","gateway":"10.1.0.1"}]}`,
		`{"name":"n","ranges":[{"subnet":"10.0.0.0/24","exclude":["x"]}]}`,
	} {
		if c, err := LoadConf([]byte(bad)); err != nil || c.rangesErr == nil {
			t.Errorf("%s: err %v, rangesErr %v; want the ranges error kept for ADD", bad, err, c.rangesErr)
		}
	}
}
