package grid

import (
	"context"

	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	appsinformers "k8s.io/client-go/informers/apps/v1"
	coreinformers "k8s.io/client-go/informers/core/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/record"

	"github.com/staticip/staticip/apis/generated/clientset/versioned"
	superedgeinformers "github.com/staticip/staticip/apis/generated/informers/externalversions/superedge/v1"
	superedgev1 "github.com/staticip/staticip/apis/superedge/v1"
)

// Controller names for --controllers, metrics and logs.
const (
	DeploymentGridName  = "deploymentgrid"
	StatefulSetGridName = "statefulsetgrid"
	ServiceGridName     = "servicegrid"
)

func deleteOptions(uid types.UID) metav1.DeleteOptions {
	return metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &uid}}
}

// NewDeploymentGridController: one Deployment per node unit of every DeploymentGrid.
func NewDeploymentGridController(kube kubernetes.Interface, client versioned.Interface,
	gridInformer superedgeinformers.DeploymentGridInformer, deployInformer appsinformers.DeploymentInformer,
	nodeInformer coreinformers.NodeInformer, recorder record.EventRecorder) (*workloadController, error) {
	gridLister, deployLister := gridInformer.Lister(), deployInformer.Lister()
	ops := workloadOps{
		name: DeploymentGridName, gridKind: DeploymentGridKind, kind: "Deployment", maxLen: MaxDeploymentNameLen,
		getGrid: func(ns, name string) (*gridView, error) {
			g, err := gridLister.DeploymentGrids(ns).Get(name)
			if err != nil {
				return nil, err
			}
			return &gridView{obj: g, robj: g, key: g.Spec.GridUniqKey, selector: g.Spec.Template.Selector,
				podLabels: g.Spec.Template.Template.Labels, status: &g.Status, generation: g.Generation}, nil
		},
		getGridLive: func(ctx context.Context, ns, name string) (metav1.Object, error) {
			return client.SuperedgeV1().DeploymentGrids(ns).Get(ctx, name, metav1.GetOptions{})
		},
		gridsInNS: func(ns string) ([]metav1.Object, error) {
			gs, err := gridLister.DeploymentGrids(ns).List(labels.Everything())
			out := make([]metav1.Object, len(gs))
			for i := range gs {
				out[i] = gs[i]
			}
			return out, err
		},
		list: func(ns string) ([]metav1.Object, error) {
			ds, err := deployLister.Deployments(ns).List(labels.Everything())
			out := make([]metav1.Object, len(ds))
			for i := range ds {
				out[i] = ds[i]
			}
			return out, err
		},
		funcs: func(v *gridView) workloadFuncs {
			g := v.robj.(*superedgev1.DeploymentGrid)
			return workloadFuncs{kind: "Deployment", maxNameLen: MaxDeploymentNameLen,
				desired: func(value, name string) metav1.Object { return DesiredDeployment(g, value, name) },
				update: func(existing, desired metav1.Object) metav1.Object {
					if u := DeploymentUpdate(existing.(*appsv1.Deployment), desired.(*appsv1.Deployment), g.Spec.GridUniqKey); u != nil {
						return u
					}
					return nil
				},
				unitStatus: func(value string, w metav1.Object) superedgev1.GridUnitStatus {
					return DeploymentUnitStatus(value, w.(*appsv1.Deployment))
				},
			}
		},
		create: func(ctx context.Context, w metav1.Object) error {
			_, err := kube.AppsV1().Deployments(w.GetNamespace()).Create(ctx, w.(*appsv1.Deployment), metav1.CreateOptions{})
			return err
		},
		put: func(ctx context.Context, w metav1.Object) error {
			_, err := kube.AppsV1().Deployments(w.GetNamespace()).Update(ctx, w.(*appsv1.Deployment), metav1.UpdateOptions{})
			return err
		},
		remove: func(ctx context.Context, ns, name string, uid types.UID) error {
			return kube.AppsV1().Deployments(ns).Delete(ctx, name, deleteOptions(uid))
		},
		patch: func(ctx context.Context, ns, name string, data []byte) error {
			_, err := kube.AppsV1().Deployments(ns).Patch(ctx, name, types.StrategicMergePatchType, data, metav1.PatchOptions{})
			return err
		},
		writeStatus: func(ctx context.Context, v *gridView, st superedgev1.WorkloadGridStatus) error {
			g := v.robj.(*superedgev1.DeploymentGrid).DeepCopy()
			g.Status = st
			_, err := client.SuperedgeV1().DeploymentGrids(g.Namespace).UpdateStatus(ctx, g, metav1.UpdateOptions{})
			return err
		},
	}
	return newWorkloadController(ops, gridInformer.Informer(), deployInformer.Informer(), nodeInformer, recorder,
		func(obj any) (string, bool) {
			g, ok := obj.(*superedgev1.DeploymentGrid)
			if !ok {
				return "", false
			}
			return g.Spec.GridUniqKey, true
		})
}

// NewStatefulSetGridController: one StatefulSet per node unit of every StatefulSetGrid.
func NewStatefulSetGridController(kube kubernetes.Interface, client versioned.Interface,
	gridInformer superedgeinformers.StatefulSetGridInformer, stsInformer appsinformers.StatefulSetInformer,
	nodeInformer coreinformers.NodeInformer, recorder record.EventRecorder) (*workloadController, error) {
	gridLister, stsLister := gridInformer.Lister(), stsInformer.Lister()
	ops := workloadOps{
		name: StatefulSetGridName, gridKind: StatefulSetGridKind, kind: "StatefulSet", maxLen: MaxStatefulSetNameLen,
		getGrid: func(ns, name string) (*gridView, error) {
			g, err := gridLister.StatefulSetGrids(ns).Get(name)
			if err != nil {
				return nil, err
			}
			return &gridView{obj: g, robj: g, key: g.Spec.GridUniqKey, selector: g.Spec.Template.Selector,
				podLabels: g.Spec.Template.Template.Labels, status: &g.Status, generation: g.Generation}, nil
		},
		getGridLive: func(ctx context.Context, ns, name string) (metav1.Object, error) {
			return client.SuperedgeV1().StatefulSetGrids(ns).Get(ctx, name, metav1.GetOptions{})
		},
		gridsInNS: func(ns string) ([]metav1.Object, error) {
			gs, err := gridLister.StatefulSetGrids(ns).List(labels.Everything())
			out := make([]metav1.Object, len(gs))
			for i := range gs {
				out[i] = gs[i]
			}
			return out, err
		},
		list: func(ns string) ([]metav1.Object, error) {
			ss, err := stsLister.StatefulSets(ns).List(labels.Everything())
			out := make([]metav1.Object, len(ss))
			for i := range ss {
				out[i] = ss[i]
			}
			return out, err
		},
		funcs: func(v *gridView) workloadFuncs {
			g := v.robj.(*superedgev1.StatefulSetGrid)
			return workloadFuncs{kind: "StatefulSet", maxNameLen: MaxStatefulSetNameLen,
				desired: func(value, name string) metav1.Object { return DesiredStatefulSet(g, value, name) },
				update: func(existing, desired metav1.Object) metav1.Object {
					if u := StatefulSetUpdate(existing.(*appsv1.StatefulSet), desired.(*appsv1.StatefulSet), g.Spec.GridUniqKey); u != nil {
						return u
					}
					return nil
				},
				unitStatus: func(value string, w metav1.Object) superedgev1.GridUnitStatus {
					return StatefulSetUnitStatus(value, w.(*appsv1.StatefulSet))
				},
			}
		},
		create: func(ctx context.Context, w metav1.Object) error {
			_, err := kube.AppsV1().StatefulSets(w.GetNamespace()).Create(ctx, w.(*appsv1.StatefulSet), metav1.CreateOptions{})
			return err
		},
		put: func(ctx context.Context, w metav1.Object) error {
			_, err := kube.AppsV1().StatefulSets(w.GetNamespace()).Update(ctx, w.(*appsv1.StatefulSet), metav1.UpdateOptions{})
			return err
		},
		remove: func(ctx context.Context, ns, name string, uid types.UID) error {
			return kube.AppsV1().StatefulSets(ns).Delete(ctx, name, deleteOptions(uid))
		},
		patch: func(ctx context.Context, ns, name string, data []byte) error {
			_, err := kube.AppsV1().StatefulSets(ns).Patch(ctx, name, types.StrategicMergePatchType, data, metav1.PatchOptions{})
			return err
		},
		writeStatus: func(ctx context.Context, v *gridView, st superedgev1.WorkloadGridStatus) error {
			g := v.robj.(*superedgev1.StatefulSetGrid).DeepCopy()
			g.Status = st
			_, err := client.SuperedgeV1().StatefulSetGrids(g.Namespace).UpdateStatus(ctx, g, metav1.UpdateOptions{})
			return err
		},
	}
	return newWorkloadController(ops, gridInformer.Informer(), stsInformer.Informer(), nodeInformer, recorder,
		func(obj any) (string, bool) {
			g, ok := obj.(*superedgev1.StatefulSetGrid)
			if !ok {
				return "", false
			}
			return g.Spec.GridUniqKey, true
		})
}
