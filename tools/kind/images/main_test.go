package main

import (
	"path/filepath"
	"testing"

	"github.com/staticip/staticip/tools/images/imagebuilder"
)

func TestImageForKubeadmRefs(t *testing.T) {
	for _, tc := range []struct{ ref, name, path string }{
		{"registry.k8s.io/kube-apiserver:v1.36.3", "kube-apiserver", "/usr/local/bin/kube-apiserver"},
		{"registry.k8s.io/kube-proxy:v1.36.3", "kube-proxy", "/usr/local/bin/kube-proxy"},
		{"registry.k8s.io/etcd:3.6.8-0", "etcd", "/usr/local/bin/etcd"},
		{"registry.k8s.io/coredns/coredns:v1.14.2", "coredns", "/coredns"},
		{"registry.k8s.io/pause:3.10.2", "pause", "/pause"},
	} {
		if got := name(tc.ref); got != tc.name {
			t.Errorf("name(%s) = %s, want %s", tc.ref, got, tc.name)
		}
		im, err := imageFor(tc.ref, "/bin-dir")
		if err != nil {
			t.Fatal(err)
		}
		if im.Ref != tc.ref || im.Path != tc.path {
			t.Errorf("imageFor(%s) = ref %s path %s, want path %s", tc.ref, im.Ref, im.Path, tc.path)
		}
	}
	if _, err := imageFor("registry.k8s.io/kindnetd:v1", "/bin-dir"); err == nil {
		t.Error("an image kubeadm names that we cannot build must be an error, not a silent skip")
	}
}

func TestAppImageKeepsTheAgentsPlugin(t *testing.T) {
	bin := "/b"
	defaults := imagebuilder.Defaults(bin)
	agent := appImage("staticip/staticip-agent:latest", bin, defaults)
	if agent.Ref != "staticip/staticip-agent:latest" || agent.Extra["/staticip"] != filepath.Join(bin, "staticip") {
		t.Errorf("agent image = %+v; want the manifest's ref and the plugin binary", agent)
	}
	sched := appImage("staticip/staticip-scheduler:dev", bin, defaults)
	if sched.Binary != filepath.Join(bin, "staticip-scheduler") || sched.Path != "/staticip-scheduler" || sched.Tarball != "app-staticip-scheduler.tar" {
		t.Errorf("scheduler image = %+v", sched)
	}
}
