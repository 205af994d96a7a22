package kubectlplugin

import (
	"fmt"
	"io"
	"sort"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/duration"
	"k8s.io/cli-runtime/pkg/printers"

	jkev1alpha1 "github.com/staticip/staticip/apis/jke/v1alpha1"
)

// WaitingFor says what a NodeFailover waits for: "-" when completed; the Stopped or Paused
// condition when True; else the Progressing condition's reason and message; else the last error.
func WaitingFor(fo *jkev1alpha1.NodeFailover) string {
	if fo.Status.Phase == jkev1alpha1.FailoverCompleted {
		return "-"
	}
	for _, t := range []string{jkev1alpha1.NodeFailoverConditionStopped, jkev1alpha1.NodeFailoverConditionPaused, jkev1alpha1.NodeFailoverConditionDeleting} {
		if c := meta.FindStatusCondition(fo.Status.Conditions, t); c != nil && c.Status == metav1.ConditionTrue {
			return condText(t, c)
		}
	}
	if c := meta.FindStatusCondition(fo.Status.Conditions, jkev1alpha1.NodeFailoverConditionProgressing); c != nil {
		return condText(c.Reason, c)
	}
	if fo.Status.LastError != "" {
		return "error: " + fo.Status.LastError
	}
	return "<unknown>"
}

func condText(head string, c *metav1.Condition) string {
	if c.Message == "" {
		return head
	}
	if head == "" {
		return c.Message
	}
	return head + ": " + c.Message
}

// PrintFailovers writes the NodeFailover records as a table: node, phase, target, what each
// waits for and its age; wide adds the moved ranges and StaticIPs and the last error.
func PrintFailovers(out io.Writer, fos []jkev1alpha1.NodeFailover, wide bool, now time.Time) error {
	if len(fos) == 0 {
		_, err := fmt.Fprintln(out, "No NodeFailovers found.")
		return err
	}
	sort.Slice(fos, func(i, j int) bool { return fos[i].Name < fos[j].Name })
	w := printers.GetNewTabWriter(out)
	if wide {
		fmt.Fprintln(w, "NAME\tNODE\tPHASE\tTARGET\tWAITING-FOR\tMOVED-RANGES\tMOVED-STATICIPS\tLAST-ERROR\tAGE")
	} else {
		fmt.Fprintln(w, "NAME\tNODE\tPHASE\tTARGET\tWAITING-FOR\tAGE")
	}
	for i := range fos {
		fo := &fos[i]
		target := fo.Status.Target
		if target == "" {
			target = fo.Spec.Target
		}
		age := duration.HumanDuration(now.Sub(fo.CreationTimestamp.Time))
		if wide {
			rebound := 0
			for _, s := range fo.Status.MovedStaticIPs {
				if s.Rebound {
					rebound++
				}
			}
			fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%d\t%d/%d rebound\t%s\t%s\n", fo.Name, fo.Spec.Node, none(string(fo.Status.Phase)), none(target),
				WaitingFor(fo), len(fo.Status.MovedRanges), rebound, len(fo.Status.MovedStaticIPs), none(fo.Status.LastError), age)
		} else {
			fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\n", fo.Name, fo.Spec.Node, none(string(fo.Status.Phase)), none(target), WaitingFor(fo), age)
		}
	}
	return w.Flush()
}
