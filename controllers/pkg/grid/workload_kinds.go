package grid

import (
	"context"

	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	appsinformers "k8s.io/client-go/informers/apps/v1"
	coreinformers "k8s.io/client-go/informers/core/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
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
	return newKindController(gridKind[*superedgev1.DeploymentGrid, *appsv1.Deployment]{
		name: DeploymentGridName, gridKind: DeploymentGridKind, kind: "Deployment", maxLen: MaxDeploymentNameLen,
		cachedGrids: func(ns string) namespaceLister[*superedgev1.DeploymentGrid] {
			return gridInformer.Lister().DeploymentGrids(ns)
		},
		grids: func(ns string) gridClient[*superedgev1.DeploymentGrid] {
			return client.SuperedgeV1().DeploymentGrids(ns)
		},
		cachedWorkloads: func(ns string) namespaceLister[*appsv1.Deployment] {
			return deployInformer.Lister().Deployments(ns)
		},
		workloads: func(ns string) workloadClient[*appsv1.Deployment] { return kube.AppsV1().Deployments(ns) },
		fields: func(g *superedgev1.DeploymentGrid) gridFields {
			return gridFields{key: g.Spec.GridUniqKey, selector: g.Spec.Template.Selector,
				podLabels: g.Spec.Template.Template.Labels, status: &g.Status}
		},
		desired: DesiredDeployment, update: DeploymentUpdate, unitStatus: DeploymentUnitStatus,
	}, gridInformer.Informer(), deployInformer.Informer(), nodeInformer, recorder)
}

// NewStatefulSetGridController: one StatefulSet per node unit of every StatefulSetGrid.
func NewStatefulSetGridController(kube kubernetes.Interface, client versioned.Interface,
	gridInformer superedgeinformers.StatefulSetGridInformer, stsInformer appsinformers.StatefulSetInformer,
	nodeInformer coreinformers.NodeInformer, recorder record.EventRecorder) (*workloadController, error) {
	return newKindController(gridKind[*superedgev1.StatefulSetGrid, *appsv1.StatefulSet]{
		name: StatefulSetGridName, gridKind: StatefulSetGridKind, kind: "StatefulSet", maxLen: MaxStatefulSetNameLen,
		cachedGrids: func(ns string) namespaceLister[*superedgev1.StatefulSetGrid] {
			return gridInformer.Lister().StatefulSetGrids(ns)
		},
		grids: func(ns string) gridClient[*superedgev1.StatefulSetGrid] {
			return client.SuperedgeV1().StatefulSetGrids(ns)
		},
		cachedWorkloads: func(ns string) namespaceLister[*appsv1.StatefulSet] {
			return stsInformer.Lister().StatefulSets(ns)
		},
		workloads: func(ns string) workloadClient[*appsv1.StatefulSet] { return kube.AppsV1().StatefulSets(ns) },
		fields: func(g *superedgev1.StatefulSetGrid) gridFields {
			return gridFields{key: g.Spec.GridUniqKey, selector: g.Spec.Template.Selector,
				podLabels: g.Spec.Template.Template.Labels, status: &g.Status}
		},
		desired: DesiredStatefulSet, update: StatefulSetUpdate, unitStatus: StatefulSetUnitStatus,
	}, gridInformer.Informer(), stsInformer.Informer(), nodeInformer, recorder)
}

// object is an API object of one Go type T (*DeploymentGrid, *Deployment, ...).
type object[T any] interface {
	comparable
	metav1.Object
	runtime.Object
	DeepCopy() T
}

// namespaceLister is a generated lister for one namespace.
type namespaceLister[T any] interface {
	List(selector labels.Selector) ([]T, error)
	Get(name string) (T, error)
}

// gridClient is the part of a generated grid client the loop uses.
type gridClient[G any] interface {
	Get(ctx context.Context, name string, opts metav1.GetOptions) (G, error)
	UpdateStatus(ctx context.Context, grid G, opts metav1.UpdateOptions) (G, error)
}

// workloadClient is the part of a generated workload client the loop uses.
type workloadClient[W any] interface {
	Create(ctx context.Context, w W, opts metav1.CreateOptions) (W, error)
	Update(ctx context.Context, w W, opts metav1.UpdateOptions) (W, error)
	Delete(ctx context.Context, name string, opts metav1.DeleteOptions) error
	Patch(ctx context.Context, name string, pt types.PatchType, data []byte, opts metav1.PatchOptions, subresources ...string) (W, error)
}

// gridFields are the fields of a workload grid the loop reads (both kinds have them, under
// spec types of their own).
type gridFields struct {
	key       string
	selector  *metav1.LabelSelector
	podLabels map[string]string
	status    *superedgev1.WorkloadGridStatus
}

// gridKind is one workload grid kind G and the workload kind W it creates per node unit: the
// typed listers, clients and pure functions (desired.go) of the pair. ops turns it into the
// untyped workloadOps the shared loop (workload_controller.go) runs on.
type gridKind[G object[G], W object[W]] struct {
	name     string // controller name
	gridKind schema.GroupVersionKind
	kind     string // workload kind
	maxLen   int    // of a workload name

	cachedGrids     func(ns string) namespaceLister[G]
	grids           func(ns string) gridClient[G]
	cachedWorkloads func(ns string) namespaceLister[W]
	workloads       func(ns string) workloadClient[W]
	fields          func(G) gridFields

	desired    func(g G, value, name string) W
	update     func(existing, desired W, key string) W // zero: nothing to write
	unitStatus func(value string, w W) superedgev1.GridUnitStatus
}

func newKindController[G object[G], W object[W]](k gridKind[G, W], gridInformer, workloadInformer cache.SharedIndexInformer,
	nodeInformer coreinformers.NodeInformer, recorder record.EventRecorder) (*workloadController, error) {
	return newWorkloadController(k.ops(), gridInformer, workloadInformer, nodeInformer, recorder, func(obj any) (string, bool) {
		g, ok := obj.(G)
		if !ok {
			return "", false
		}
		return k.fields(g).key, true
	})
}

func (k gridKind[G, W]) ops() workloadOps {
	return workloadOps{
		name: k.name, gridKind: k.gridKind, kind: k.kind, maxLen: k.maxLen,
		getGrid: func(ns, name string) (*gridView, error) {
			g, err := k.cachedGrids(ns).Get(name)
			if err != nil {
				return nil, err
			}
			f := k.fields(g)
			return &gridView{obj: g, robj: g, key: f.key, selector: f.selector, podLabels: f.podLabels, status: f.status,
				generation: g.GetGeneration()}, nil
		},
		getGridLive: func(ctx context.Context, ns, name string) (metav1.Object, error) {
			return k.grids(ns).Get(ctx, name, metav1.GetOptions{})
		},
		gridsInNS: func(ns string) ([]metav1.Object, error) { return objects(k.cachedGrids(ns).List(labels.Everything())) },
		list: func(ns string) ([]metav1.Object, error) {
			return objects(k.cachedWorkloads(ns).List(labels.Everything()))
		},
		funcs: func(v *gridView) workloadFuncs {
			g := v.robj.(G)
			return workloadFuncs{kind: k.kind, maxNameLen: k.maxLen,
				desired: func(value, name string) metav1.Object { return k.desired(g, value, name) },
				update: func(existing, desired metav1.Object) metav1.Object {
					var none W
					if u := k.update(existing.(W), desired.(W), k.fields(g).key); u != none {
						return u
					}
					return nil // not a typed nil
				},
				unitStatus: func(value string, w metav1.Object) superedgev1.GridUnitStatus { return k.unitStatus(value, w.(W)) },
			}
		},
		create: func(ctx context.Context, w metav1.Object) error {
			_, err := k.workloads(w.GetNamespace()).Create(ctx, w.(W), metav1.CreateOptions{})
			return err
		},
		put: func(ctx context.Context, w metav1.Object) error {
			_, err := k.workloads(w.GetNamespace()).Update(ctx, w.(W), metav1.UpdateOptions{})
			return err
		},
		remove: func(ctx context.Context, ns, name string, uid types.UID) error {
			return k.workloads(ns).Delete(ctx, name, deleteOptions(uid))
		},
		patch: func(ctx context.Context, ns, name string, data []byte) error {
			_, err := k.workloads(ns).Patch(ctx, name, types.StrategicMergePatchType, data, metav1.PatchOptions{})
			return err
		},
		writeStatus: func(ctx context.Context, v *gridView, st superedgev1.WorkloadGridStatus) error {
			g := v.robj.(G).DeepCopy()
			*k.fields(g).status = st
			_, err := k.grids(g.GetNamespace()).UpdateStatus(ctx, g, metav1.UpdateOptions{})
			return err
		},
	}
}

// objects converts a typed list to the loop's []metav1.Object.
func objects[T metav1.Object](items []T, err error) ([]metav1.Object, error) {
	out := make([]metav1.Object, len(items))
	for i := range items {
		out[i] = items[i]
	}
	return out, err
}
