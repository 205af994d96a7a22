package manager

import (
	"context"
	"net/http"
	"net/http/httptest"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kubeinformers "k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	kubefake "k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/record"

	jkefake "github.com/staticip/staticip/apis/generated/clientset/versioned/fake"
	"github.com/staticip/staticip/apis/generated/informers/externalversions"
)

// TestControllerDescriptors: every controller has a unique name and a constructor, and its
// constructor builds it from fake clients taking exactly the informers its descriptor lists.
func TestControllerDescriptors(t *testing.T) {
	seen := map[string]bool{}
	for _, d := range controllerDescriptors() {
		t.Run(d.name, func(t *testing.T) {
			if d.name == "" || seen[d.name] || d.constructor == nil {
				t.Fatalf("descriptor %+v: empty or duplicate name, or no constructor", d)
			}
			seen[d.name] = true
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			cc := controllerContext{kube: kubefake.NewClientset(), client: jkefake.NewSimpleClientset(),
				recorder: record.NewFakeRecorder(10), opts: NewOptions()}
			cc.kubeInformers = kubeinformers.NewSharedInformerFactory(cc.kube, 0)
			cc.jkeInformers = externalversions.NewSharedInformerFactory(cc.client, 0)
			if _, err := d.constructor(cc); err != nil {
				t.Fatalf("constructor: %v", err)
			}
			cc.kubeInformers.Start(ctx.Done())
			cc.jkeInformers.Start(ctx.Done())
			defer cc.kubeInformers.Shutdown()
			defer cc.jkeInformers.Shutdown()
			defer cancel() // before Shutdown, which waits for the informers to stop
			var got []string
			// Only the started informers' types are wanted: a closed channel returns them at once.
			closed := make(chan struct{})
			close(closed)
			for typ := range cc.kubeInformers.WaitForCacheSync(closed) {
				got = append(got, typ.String())
			}
			for typ := range cc.jkeInformers.WaitForCacheSync(closed) {
				got = append(got, typ.String())
			}
			var want []string
			for _, obj := range d.informers {
				want = append(want, reflect.TypeOf(obj).String())
			}
			slices.Sort(got)
			slices.Sort(want)
			if !slices.Equal(got, want) {
				t.Errorf("informers taken: %v; the descriptor lists %v", got, want)
			}
		})
	}
	if got := len(seen); got != len(KnownControllers) {
		t.Errorf("%d descriptors, %d known controllers", got, len(KnownControllers))
	}
}

// TestResolveControllersDisabledByDefault: '*' leaves a controller disabled by default off;
// its name turns it on.
func TestResolveControllersDisabledByDefault(t *testing.T) {
	descs := []controllerDescriptor{{name: "a"}, {name: "b", disabledByDefault: true}, {name: "c"}}
	for _, tc := range []struct {
		flags []string
		want  []string
	}{
		{[]string{"*"}, []string{"a", "c"}},
		{[]string{"*", "b"}, []string{"a", "b", "c"}},
		{[]string{"b"}, []string{"b"}},
		{[]string{"*", "-a"}, []string{"c"}},
	} {
		got, err := resolveControllers(descs, tc.flags)
		if err != nil || !slices.Equal(got, tc.want) {
			t.Errorf("%v: got %v %v, want %v", tc.flags, got, err, tc.want)
		}
	}
}

func TestEnabledControllers(t *testing.T) {
	for _, tc := range []struct {
		flag    []string
		want    []string
		wantErr string
	}{
		{flag: []string{"*"}, want: []string{"enhancedstatefulset", "staticip", "deploymentgrid", "statefulsetgrid", "servicegrid", "nodefailover", "ippool", "bgppeer"}},
		{flag: []string{"*", "-deploymentgrid", "-statefulsetgrid", "-servicegrid", "-nodefailover", "-ippool", "-bgppeer"}, want: []string{"enhancedstatefulset", "staticip"}},
		{flag: []string{"servicegrid", "statefulsetgrid"}, want: []string{"statefulsetgrid", "servicegrid"}},
		{flag: []string{"staticip"}, want: []string{"staticip"}},
		{flag: []string{"*", "-staticip"}, want: []string{"enhancedstatefulset", "deploymentgrid", "statefulsetgrid", "servicegrid", "nodefailover", "ippool", "bgppeer"}},
		{flag: []string{"ippool"}, want: []string{"ippool"}},
		{flag: []string{"bgppeer"}, want: []string{"bgppeer"}},
		{flag: []string{"nodefailover"}, want: []string{"nodefailover"}},
		{flag: []string{"enhancedstatefulset", "staticip"}, want: []string{"enhancedstatefulset", "staticip"}},
		{flag: []string{"nodefailovers"}, wantErr: `unknown controller "nodefailovers"`},
	} {
		o := NewOptions()
		o.Controllers = tc.flag
		got, err := o.EnabledControllers()
		if tc.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("%v: err %v, want %q", tc.flag, err, tc.wantErr)
			}
			continue
		}
		if err != nil || !slices.Equal(got, tc.want) {
			t.Errorf("%v: got %v %v, want %v", tc.flag, got, err, tc.want)
		}
	}
}

// Each controller gets API clients of its own, as kube-controller-manager's controllers do: its
// own rate limiter (a burst of one controller's writes does not queue another's behind it) and
// a user agent naming it, on requests that reach the server.
func TestEachControllerHasClientsOfItsOwn(t *testing.T) {
	agents := make(chan string, 8)
	accepts := make(chan string, 8)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		agents <- r.UserAgent()
		accepts <- r.Header.Get("Accept")
		w.Header().Set("Content-Type", "application/json")
		if strings.HasPrefix(r.URL.Path, "/apis/jke.jdcloud.com/") {
			_, _ = w.Write([]byte(`{"kind":"IPPool","apiVersion":"jke.jdcloud.com/v1","metadata":{"name":"p"}}`))
			return
		}
		_, _ = w.Write([]byte(`{"kind":"Namespace","apiVersion":"v1","metadata":{"name":"default"}}`))
	}))
	defer srv.Close()
	cfg := &rest.Config{Host: srv.URL, QPS: 5, Burst: 10, UserAgent: ComponentName}
	kubeA, clientA, _, err := controllerClients(cfg, "nodefailover", false)
	if err != nil {
		t.Fatal(err)
	}
	kubeB, clientB, dynB, err := controllerClients(cfg, "enhancedstatefulset", true)
	if err != nil {
		t.Fatal(err)
	}
	if dynB == nil {
		t.Fatal("no dynamic client for a manager that has one")
	}
	if kubeA.CoreV1().RESTClient().GetRateLimiter() == kubeB.CoreV1().RESTClient().GetRateLimiter() ||
		clientA.JkeV1().RESTClient().GetRateLimiter() == clientB.JkeV1().RESTClient().GetRateLimiter() {
		t.Fatal("two controllers share a rate limiter")
	}
	if kubeA.CoreV1().RESTClient().GetRateLimiter() != kubeA.AppsV1().RESTClient().GetRateLimiter() {
		t.Fatal("one controller's API groups have separate limiters: its --kube-api-qps would apply per group")
	}
	for _, c := range []struct {
		kube kubernetes.Interface
		want string
	}{{kubeA, ComponentName + "/nodefailover"}, {kubeB, ComponentName + "/enhancedstatefulset"}} {
		if _, err := c.kube.CoreV1().Namespaces().Get(context.Background(), "default", metav1.GetOptions{}); err != nil {
			t.Fatal(err)
		}
		if got := <-agents; got != c.want {
			t.Fatalf("user agent %q, want %q", got, c.want)
		}
		<-accepts
	}
	// Custom resources have no protobuf: their client asks for JSON.
	if _, err := clientA.JkeV1().IPPools().Get(context.Background(), "p", metav1.GetOptions{}); err != nil {
		t.Fatal(err)
	}
	<-agents
	if got := <-accepts; strings.Contains(got, "protobuf") {
		t.Fatalf("custom resource client accepts %q, want JSON", got)
	}
}
