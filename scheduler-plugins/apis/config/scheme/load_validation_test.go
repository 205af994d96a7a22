package scheme_test

import (
	"strings"
	"testing"

	"k8s.io/klog/v2"
	"k8s.io/kubernetes/cmd/kube-scheduler/app/options"
)

// Validation runs at configuration load, not only when the plugin is built: kube-scheduler's
// loader fails and names the field.
func TestBadArgsFailTheLoad(t *testing.T) {
	for _, tc := range []struct{ args, want string }{
		{"  - name: PodFitsResourcesWithStaticIP\n    args:\n      nodesWithoutIPRange: Sometimes\n", "nodesWithoutIPRange"},
		{"  - name: CheckPodAnnotationWithStaticIP\n    args:\n      ipAddressAnnotation: \"not a key!\"\n", "ipAddressAnnotation"},
		// Deprecated: any key but the one constant fails the load, saying why.
		{"  - name: CheckPodAnnotationWithStaticIP\n    args:\n      ipAddressAnnotation: example.com/ip\n",
			`ipAddressAnnotation: Invalid value: "example.com/ip": deprecated and no longer configurable: the scheduler, the CNI and the admission policies all read staticip.jke.jdcloud.com/ip-address`},
		{"  - name: CheckPodAnnotationWithStaticIP\n    args:\n      unknownIP: Maybe\n", "unknownIP"},
	} {
		_, err := options.LoadConfigFromFile(klog.Background(), writeConfig(t, header+"  pluginConfig:\n"+tc.args))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("loading args %q: err = %v, want an error naming %s", tc.args, err, tc.want)
		}
	}
}

// A configuration written while the key was configurable, with the one key, still loads.
func TestDeprecatedIPAddressAnnotationEqualToTheKeyLoads(t *testing.T) {
	if _, err := options.LoadConfigFromFile(klog.Background(), writeConfig(t, header+"  pluginConfig:\n"+
		"  - name: CheckPodAnnotationWithStaticIP\n    args:\n      ipAddressAnnotation: staticip.jke.jdcloud.com/ip-address\n")); err != nil {
		t.Fatal(err)
	}
}
