package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/netip"
	"net/url"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/vishvananda/netlink"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	sipclient "github.com/staticip/staticip/apis/generated/clientset/versioned"
	jkev1 "github.com/staticip/staticip/apis/jke/v1"
	"github.com/staticip/staticip/internal/testenv"
	"github.com/staticip/staticip/ipam"
)

// The with-API run: staticip as a node runs it, with a kubeconfig, against a real
// kube-apiserver (internal/testenv: etcd + kube-apiserver from _output/bin on loopback, the
// staticip CRDs). What a node's plugin asks the API server on every call is then in the
// figures: on ADD the pod (its annotations; the runtime passes none here), and for a new
// allocation the IPRange the address comes from (the fence check: was the range moved while
// this node was off?); on DEL the pod's StaticIP (keep the IP reserved while it exists).
const (
	apiNamespace = "bench"
	apiRange     = "bench-range"
	apiNode      = "bench-node"
	apiSubnet    = "10.132.0.0/16"
)

// apiPodName is the pod each worker's calls are for: the with-API plugin's pods exist, as a
// node's do, and none has a StaticIP, so every DEL releases its IP (an ordinary pod).
func apiPodName(pod int) string { return fmt.Sprintf("bench-pod-%d", pod) }

// apiServer is the control plane of the with-API run.
type apiServer struct {
	env        *testenv.Env
	kubeconfig string
	forward    net.Listener
}

// startAPIServer brings up the API server and writes what a node has before its first pod:
// the IPRange the node serves, the pods, a kubeconfig for the plugin. The plugins run in the
// tool's "host" network namespace, which cannot reach the machine's loopback, where
// kube-apiserver listens: the kubeconfig names a forwarder on the host namespace's own
// loopback instead (a TCP relay in this process; nothing is added to the machine's network).
// The relay adds a user-space hop to each connection the plugin opens: the plugin opens one per
// call, as on a node, so every call pays it once.
func startAPIServer(ctx context.Context, work string, host ns.NetNS, pods int) (*apiServer, error) {
	env, err := testenv.Start()
	if err != nil {
		return nil, fmt.Errorf("with-API run: %w (-api=false skips it)", err)
	}
	s := &apiServer{env: env, kubeconfig: filepath.Join(work, "kubeconfig")}
	if err := s.seed(ctx, host, pods); err != nil {
		s.stop()
		return nil, err
	}
	return s, nil
}

// forwardFrom listens on the loopback of netns (bringing it up) and relays every connection
// to target, dialled from the machine's namespace.
func forwardFrom(netns ns.NetNS, target string) (net.Listener, error) {
	var ln net.Listener
	err := netns.Do(func(ns.NetNS) error {
		lo, err := netlink.LinkByName("lo")
		if err != nil {
			return err
		}
		if err := netlink.LinkSetUp(lo); err != nil {
			return err
		}
		// The socket belongs to the namespace it was created in, whichever thread serves it later.
		ln, err = net.Listen("tcp", "127.0.0.1:0")
		return err
	})
	if err != nil {
		return nil, err
	}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go relay(c, target)
		}
	}()
	return ln, nil
}

func relay(c net.Conn, target string) {
	defer c.Close()
	u, err := net.Dial("tcp", target)
	if err != nil {
		return
	}
	defer u.Close()
	done := make(chan struct{}, 2)
	go func() { _, _ = io.Copy(u, c); done <- struct{}{} }()
	go func() { _, _ = io.Copy(c, u); done <- struct{}{} }()
	<-done
}

func (s *apiServer) seed(ctx context.Context, host ns.NetNS, pods int) error {
	server, err := url.Parse(s.env.Config.Host)
	if err != nil {
		return err
	}
	if s.forward, err = forwardFrom(host, server.Host); err != nil {
		return fmt.Errorf("relay into the host namespace: %w", err)
	}
	// kube-apiserver's serving certificate names 127.0.0.1, which the relay's address is too.
	plugin := rest.CopyConfig(s.env.Config)
	plugin.Host = "https://" + s.forward.Addr().String()
	if err := testenv.WriteKubeconfig(plugin, s.kubeconfig); err != nil {
		return err
	}
	kube, err := kubernetes.NewForConfig(s.env.Config)
	if err != nil {
		return err
	}
	if _, err := kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: apiNamespace}}, metav1.CreateOptions{}); err != nil {
		return err
	}
	for i := range pods {
		pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: apiPodName(i), Namespace: apiNamespace},
			Spec: corev1.PodSpec{NodeName: apiNode, Containers: []corev1.Container{{Name: "c", Image: "none"}}}}
		if _, err := kube.CoreV1().Pods(apiNamespace).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
			return err
		}
	}
	sip, err := sipclient.NewForConfig(s.env.Config)
	if err != nil {
		return err
	}
	_, err = sip.JkeV1().IPRanges().Create(ctx, &jkev1.IPRange{ObjectMeta: metav1.ObjectMeta{Name: apiRange},
		Spec: jkev1.IPRangeSpec{CIDR: apiSubnet, Node: apiNode, OwnerGeneration: 1}}, metav1.CreateOptions{})
	return err
}

// reads counts the GETs kube-apiserver has served so far by resource (pods, ipranges,
// staticips) from its apiserver_request_total: the harness itself only creates, so these are
// the plugin's.
func (s *apiServer) reads(ctx context.Context) (map[string]int, error) {
	kube, err := kubernetes.NewForConfig(s.env.Config)
	if err != nil {
		return nil, err
	}
	body, err := kube.Discovery().RESTClient().Get().AbsPath("/metrics").DoRaw(ctx)
	if err != nil {
		return nil, err
	}
	return getsByResource(string(body)), nil
}

// getsByResource sums apiserver_request_total{verb="GET"} per resource in a /metrics text.
func getsByResource(metrics string) map[string]int {
	out := map[string]int{}
	for _, line := range strings.Split(metrics, "\n") {
		if !strings.HasPrefix(line, "apiserver_request_total{") || !strings.Contains(line, `verb="GET"`) {
			continue
		}
		_, rest, ok := strings.Cut(line, `resource="`)
		if !ok {
			continue
		}
		resource, _, _ := strings.Cut(rest, `"`)
		fields := strings.Fields(line)
		v, err := strconv.ParseFloat(fields[len(fields)-1], 64)
		if err != nil {
			continue
		}
		out[resource] += int(v)
	}
	return out
}

func (s *apiServer) stop() {
	if s.forward != nil {
		s.forward.Close()
	}
	if err := s.env.Stop(); err != nil {
		fmt.Printf("cnibench: stopping the API server: %v\n", err)
	}
}

// seedNodeStore makes the with-API plugin's store what staticip-agent leaves on a node: the
// range set by the agent (the conflist's ranges no longer apply) and recorded as served under
// its IPRange's name at its ownership generation, so every new allocation makes the plugin
// ask for that IPRange.
func seedNodeStore(dataDir, network string) error {
	db, err := ipam.Open(ipam.ForNetwork(dataDir, network))
	if err != nil {
		return err
	}
	defer db.Close()
	subnet := netip.MustParsePrefix(apiSubnet)
	if _, err := db.SetNodeRanges([]ipam.Range{{Subnet: subnet}}); err != nil {
		return err
	}
	return db.RecordServed(map[string]ipam.ServedRange{apiRange: {Subnet: subnet, OwnerGeneration: 1}})
}
