package integration

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"

	jkev1alpha1 "github.com/staticip/staticip/apis/jke/v1alpha1"
	ests "github.com/staticip/staticip/controllers/pkg/enhancedstatefulset"
)

// events returns "reason: message" of the Events about object name in the test namespace.
func (f *fixture) events(name string) []string {
	f.t.Helper()
	list, err := f.kube.CoreV1().Events(f.ns).List(f.ctx, metav1.ListOptions{})
	if err != nil {
		f.t.Fatal(err)
	}
	var out []string
	for _, e := range list.Items {
		if e.InvolvedObject.Name == name {
			out = append(out, e.Reason+": "+e.Message)
		}
	}
	return out
}

func anyContains(list []string, subs ...string) bool {
	return slices.ContainsFunc(list, func(s string) bool {
		for _, sub := range subs {
			if !strings.Contains(s, sub) {
				return false
			}
		}
		return true
	})
}

// TestRollbackWithoutManualDeletion is the published example's rollback: a rollout to an image
// that cannot be pulled leaves a pod Pending; putting the old template back must finish the
// rollback on its own under both pod management policies (the StatefulSet's "forced
// rollback" would make the user delete the broken pod by hand), and while the rollout is stuck
// the set must say which pod it waits on (condition and Event).
func TestRollbackWithoutManualDeletion(t *testing.T) {
	for _, policy := range []appsv1.PodManagementPolicyType{appsv1.OrderedReadyPodManagement, appsv1.ParallelPodManagement} {
		t.Run(string(policy), func(t *testing.T) {
			f := newFixture(t)
			f.startKubelet("", 100*time.Millisecond, nil)
			f.startManager(ests.Name)
			f.createSet(newSet("web", 6, func(s *jkev1alpha1.EnhancedStatefulSet) {
				s.Spec.PodManagementPolicy = policy
				s.Spec.UpdateStrategy.RollingUpdate.Partition = ptr.To[int32](3)
				s.Spec.UpdateStrategy.RollingUpdate.MaxUnavailable = ptr.To(intstr.FromInt32(2))
			}))
			v1 := f.waitSettled("web", 2*time.Minute)
			rev1 := v1.Status.UpdateRevision

			f.updateSet("web", func(s *jkev1alpha1.EnhancedStatefulSet) { s.Spec.Template.Spec.Containers[0].Image = "app:broken" })
			var stuck string
			f.eventually(time.Minute, "a pod stuck on the broken image", func() (bool, error) {
				for name, p := range f.pods() {
					if p.Spec.Containers[0].Image == "app:broken" && p.Status.Phase == corev1.PodPending && len(p.Status.ContainerStatuses) > 0 {
						stuck = name
						return true, nil
					}
				}
				return false, nil
			})
			if err := wait.PollUntilContextTimeout(f.ctx, 100*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
				set := f.getSet("web")
				named := slices.ContainsFunc(set.Status.Conditions, func(c metav1.Condition) bool {
					return c.Status == metav1.ConditionTrue && strings.Contains(c.Message, stuck) && strings.Contains(c.Message, "ErrImagePull")
				})
				return named && anyContains(f.events("web"), "RolloutWaiting", stuck, "ErrImagePull"), nil
			}); err != nil {
				t.Errorf("no condition and Event name %s, the pod the rollout waits on: %v", stuck, err)
			}
			t.Logf("stuck: %s; conditions %+v; events %q", stuck, f.getSet("web").Status.Conditions, f.events("web"))

			// Roll back by putting the old template back; nothing else.
			f.updateSet("web", func(s *jkev1alpha1.EnhancedStatefulSet) { s.Spec.Template = v1.Spec.Template })
			set := f.waitSettled("web", time.Minute)
			if set.Status.UpdateRevision != rev1 {
				t.Errorf("updateRevision %s after the rollback, want %s", set.Status.UpdateRevision, rev1)
			}
			if got := podImages(f.pods(), "web", 6); !slices.Equal(got, slices.Repeat([]string{"app:v1"}, 6)) {
				t.Errorf("images after the rollback: %v", got)
			}
		})
	}
}
