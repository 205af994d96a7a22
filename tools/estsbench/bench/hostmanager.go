package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// The staticip-controller-manager Deployment of manifests/controller-manager and its Lease.
const (
	managerNamespace  = "staticip-system"
	managerDeployment = "staticip-controller-manager"
	managerLease      = "staticip-controller-manager"
)

// HostManager runs staticip-controller-manager as a process on this host in place of its
// Deployment, for the length of a benchmark, with the Deployment's own identity: a token of
// its ServiceAccount (TokenRequest), so the API server's policies treat it exactly as the
// Deployment's pod — the ip-address policy (manifests/admission) lets only that identity
// create a pod carrying its StaticIP's IP.
//
// Why: on the local cluster kube-controller-manager (the StatefulSet peer) and the Kruise
// peer are host processes, while the Deployment's pod runs in a container cgroup that shares
// one CPU weight with every other container, including the 50 pods being rolled. Under the
// load of a rollout on a small machine that starves the pod and times the cgroup layout, not
// the controller. With the manager on the host all controllers are scheduled alike.
type HostManager struct {
	Kube   kubernetes.Interface
	Binary string
	// Kubeconfig is the benchmark's (admin) kubeconfig: the host process reaches the same
	// API server, with the same CA, but authenticates as the Deployment's ServiceAccount.
	Kubeconfig string
	// Args are added to the manager's command line.
	Args []string
	Log  func(format string, args ...any)
}

// Start scales the Deployment to 0, waits for its pods to be gone, starts the binary (its
// log in a temporary file) and waits until it holds the Lease. stop ends the process and
// scales the Deployment back; it is safe to call more than once.
func (h *HostManager) Start(ctx context.Context) (stop func(), err error) {
	deployments := h.Kube.AppsV1().Deployments(managerNamespace)
	d, err := deployments.Get(ctx, managerDeployment, metav1.GetOptions{})
	if err != nil {
		return nil, fmt.Errorf("the manager's Deployment: %w", err)
	}
	replicas := int32(1)
	if d.Spec.Replicas != nil {
		replicas = *d.Spec.Replicas
	}
	scale := func(ctx context.Context, n int32) error {
		patch, _ := json.Marshal(map[string]any{"spec": map[string]any{"replicas": n}})
		_, err := deployments.Patch(ctx, managerDeployment, types.MergePatchType, patch, metav1.PatchOptions{})
		return err
	}
	var cmd *exec.Cmd
	// exited is closed when the started process has been waited for.
	var exited chan struct{}
	// credentials is the kubeconfig holding the ServiceAccount's token, removed at stop.
	credentials := ""
	stopped := false
	stop = func() {
		if stopped {
			return
		}
		stopped = true
		if exited != nil {
			_ = cmd.Process.Signal(syscall.SIGTERM)
			select {
			case <-exited:
			case <-time.After(30 * time.Second):
				_ = cmd.Process.Kill()
				<-exited
			}
		}
		if credentials != "" {
			_ = os.Remove(credentials)
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := scale(ctx, replicas); err != nil {
			h.Log("could not scale %s/%s back to %d: %v (kubectl -n %s scale deployment %s --replicas=%d)",
				managerNamespace, managerDeployment, replicas, err, managerNamespace, managerDeployment, replicas)
			return
		}
		h.Log("manager: host process stopped, Deployment %s/%s back at %d replicas", managerNamespace, managerDeployment, replicas)
	}
	fail := func(err error) (func(), error) { stop(); return nil, err }

	if err := scale(ctx, 0); err != nil {
		return nil, fmt.Errorf("scale the manager's Deployment to 0: %w", err)
	}
	selector := metav1.FormatLabelSelector(d.Spec.Selector)
	if err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 2*time.Minute, true, func(context.Context) (bool, error) {
		pods, err := h.Kube.CoreV1().Pods(managerNamespace).List(ctx, metav1.ListOptions{LabelSelector: selector})
		return err == nil && len(pods.Items) == 0, err
	}); err != nil {
		return fail(fmt.Errorf("the manager's pods did not go: %w", err))
	}

	account := d.Spec.Template.Spec.ServiceAccountName
	if account == "" {
		account = "default"
	}
	if credentials, err = h.serviceAccountKubeconfig(ctx, account); err != nil {
		return fail(fmt.Errorf("credentials of ServiceAccount %s/%s for the host manager: %w", managerNamespace, account, err))
	}
	logFile, err := os.CreateTemp("", "estsbench-manager-*.log")
	if err != nil {
		return fail(err)
	}
	defer logFile.Close() // the child has its own descriptor
	args := append([]string{"--kubeconfig=" + credentials, "--leader-elect-namespace=" + managerNamespace,
		"--metrics-bind-address=0", "--health-bind-address=0"}, h.Args...)
	cmd = exec.Command(h.Binary, args...)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	if err := cmd.Start(); err != nil {
		return fail(fmt.Errorf("start %s: %w", h.Binary, err))
	}
	exited = make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	// The manager's Lease identity is its hostname + "_" + a UUID (manager.Options.identity);
	// a Deployment pod's hostname is its pod name, so a holder with this host's name is ours.
	host, _ := os.Hostname()
	if err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		select {
		case <-exited:
			return false, fmt.Errorf("%s exited; its log: %s", h.Binary, logFile.Name())
		default:
		}
		lease, err := h.Kube.CoordinationV1().Leases(managerNamespace).Get(ctx, managerLease, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return false, nil
		}
		if err != nil {
			return false, err
		}
		holder := ""
		if lease.Spec.HolderIdentity != nil {
			holder = *lease.Spec.HolderIdentity
		}
		return strings.HasPrefix(holder, host+"_"), nil
	}); err != nil {
		return fail(fmt.Errorf("the host manager did not take the Lease: %w", err))
	}
	h.Log("manager: %s runs on the host (pid %d, log %s) as ServiceAccount %s/%s in place of Deployment %s/%s (%d replicas)",
		h.Binary, cmd.Process.Pid, logFile.Name(), managerNamespace, account, managerNamespace, managerDeployment, replicas)
	return stop, nil
}

// managerTokenLifetime is asked of TokenRequest for the host manager's token: longer than any
// benchmark run (the API server may shorten it; the manager then fails its requests, visibly).
const managerTokenLifetime = 12 * time.Hour

// serviceAccountKubeconfig writes a kubeconfig (mode 0600, a temporary file) that reaches the
// API server of h.Kubeconfig — its server, CA and TLS server name — with a token of
// ServiceAccount managerNamespace/account, and returns its path.
func (h *HostManager) serviceAccountKubeconfig(ctx context.Context, account string) (string, error) {
	admin, err := clientcmd.BuildConfigFromFlags("", h.Kubeconfig)
	if err != nil {
		return "", err
	}
	lifetime := int64(managerTokenLifetime / time.Second)
	tr, err := h.Kube.CoreV1().ServiceAccounts(managerNamespace).CreateToken(ctx, account,
		&authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: &lifetime}}, metav1.CreateOptions{})
	if err != nil {
		return "", err
	}
	kc := clientcmdapi.NewConfig()
	kc.Clusters["cluster"] = &clientcmdapi.Cluster{Server: admin.Host, CertificateAuthority: admin.CAFile,
		CertificateAuthorityData: admin.CAData, TLSServerName: admin.ServerName, InsecureSkipTLSVerify: admin.Insecure}
	kc.AuthInfos[account] = &clientcmdapi.AuthInfo{Token: tr.Status.Token}
	kc.Contexts[account] = &clientcmdapi.Context{Cluster: "cluster", AuthInfo: account}
	kc.CurrentContext = account
	f, err := os.CreateTemp("", "estsbench-manager-*.kubeconfig") // CreateTemp: mode 0600
	if err != nil {
		return "", err
	}
	f.Close()
	if err := clientcmd.WriteToFile(*kc, f.Name()); err != nil {
		os.Remove(f.Name())
		return "", err
	}
	return f.Name(), nil
}
