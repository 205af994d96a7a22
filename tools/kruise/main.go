// Command kruise-asts runs only OpenKruise's Advanced StatefulSet controller
// (github.com/openkruise/kruise/pkg/controller/statefulset, v1.8.0) against a cluster, without
// its webhook server and without any other Kruise controller: the third peer of
// tools/estsbench, and the real Kruise controller of controllers/test/integration's
// TestStaticIPOpenKruiseStatefulSet (make test builds it first). Not something staticip ships.
//
//	go build -o _output/bin/kruise-asts ./   (from tools/kruise)
//	kruise-asts --kubeconfig=/var/lib/staticip-c4/kubeconfig
//
// Without the webhook nothing defaults or validates apps.kruise.io StatefulSets, and pods get
// no readiness gate injected: estsbench writes every field the controller reads (replicas,
// partition, maxUnavailable, podUpdatePolicy) and the InPlaceUpdateReady readiness gate in the
// template itself.
package main

import (
	"flag"
	"fmt"
	"os"

	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/klog/v2"
	"k8s.io/klog/v2/textlogger"
	ctrl "sigs.k8s.io/controller-runtime"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	appsv1alpha1 "github.com/openkruise/kruise/apis/apps/v1alpha1"
	appsv1beta1 "github.com/openkruise/kruise/apis/apps/v1beta1"
	extclient "github.com/openkruise/kruise/pkg/client"
	"github.com/openkruise/kruise/pkg/controller/statefulset"
	"github.com/openkruise/kruise/pkg/features"
	utilclient "github.com/openkruise/kruise/pkg/util/client"
	"github.com/openkruise/kruise/pkg/util/discovery"
)

func main() {
	qps := flag.Float64("qps", 100, "client QPS (Kruise's manager default is 30; both controller-managers of this repository run unthrottled enough for 50 pods)")
	klog.InitFlags(nil)
	flag.Parse()
	ctrl.SetLogger(textlogger.NewLogger(textlogger.NewConfig()))

	scheme := runtime.NewScheme()
	utilruntime.Must(clientgoscheme.AddToScheme(scheme))
	utilruntime.Must(appsv1alpha1.AddToScheme(clientgoscheme.Scheme))
	utilruntime.Must(appsv1beta1.AddToScheme(clientgoscheme.Scheme))
	utilruntime.Must(appsv1alpha1.AddToScheme(scheme))
	utilruntime.Must(appsv1beta1.AddToScheme(scheme))
	// No pod webhook, no kruise-daemon: the feature gates that need them go off.
	features.SetDefaultFeatureGates()

	// --kubeconfig (controller-runtime's flag) or $KUBECONFIG.
	cfg, err := ctrl.GetConfig()
	if err != nil {
		fail(err)
	}
	cfg.QPS, cfg.Burst = float32(*qps), int(2**qps)
	cfg.UserAgent = "kruise-asts"
	if err := extclient.NewRegistry(cfg); err != nil {
		fail(err)
	}
	if !discovery.DiscoverGVK(appsv1beta1.SchemeGroupVersion.WithKind("StatefulSet")) {
		fail(fmt.Errorf("the API server does not serve apps.kruise.io/v1beta1 StatefulSet: install its CRD first"))
	}
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme:                 scheme,
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
		NewCache:               utilclient.NewCache,
	})
	if err != nil {
		fail(err)
	}
	if err := statefulset.Add(mgr); err != nil {
		fail(err)
	}
	if err := mgr.Start(ctrl.SetupSignalHandler()); err != nil {
		fail(err)
	}
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "kruise-asts:", err)
	os.Exit(1)
}
