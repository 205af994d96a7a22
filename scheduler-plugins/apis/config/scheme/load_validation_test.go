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
		{"  - name: CheckPodAnnotationWithStaticIP\n    args:\n      unknownIP: Maybe\n", "unknownIP"},
	} {
		_, err := options.LoadConfigFromFile(klog.Background(), writeConfig(t, header+"  pluginConfig:\n"+tc.args))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("loading args %q: err = %v, want an error naming %s", tc.args, err, tc.want)
		}
	}
}
