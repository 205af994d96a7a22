package kubectlplugin

import (
	"context"
	"fmt"
	"strings"

	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	jkev1 "github.com/staticip/staticip/apis/jke/v1"
	jkev1alpha1 "github.com/staticip/staticip/apis/jke/v1alpha1"
	superedgev1 "github.com/staticip/staticip/apis/superedge/v1"
)

// Shell completion: cobra's `completion bash|zsh|fish|powershell` command, and names from
// the cluster for arguments and flags. kubectl (1.26+) completes a plugin's arguments through
// an executable kubectl_complete-<plugin> on PATH that runs `kubectl-staticip __complete "$@"`
// (README.md, "Shell completion").

// nameLister lists the names of one resource, with a description for each (may be "").
type nameLister func(ctx context.Context, c *Clients, namespace string) (names, descriptions []string, err error)

// completeNames is a cobra completion of the names lister lists, those starting with
// toComplete, prefixed with prefix ("ests/"); nothing (and no file names) on any error: a
// completion must never print an error into the user's command line.
func (o *Options) completeNames(ctx context.Context, list nameLister, prefix, toComplete string) ([]string, cobra.ShellCompDirective) {
	c, err := o.clients()
	if err != nil {
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	ns, err := o.namespace()
	if err != nil {
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	names, descs, err := list(ctx, c, ns)
	if err != nil {
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	return CompletionCandidates(names, descs, prefix, toComplete), cobra.ShellCompDirectiveNoFileComp
}

// CompletionCandidates are prefix+name (with "\t"+description when there is one, cobra's
// form) for every name such that prefix+name starts with toComplete.
func CompletionCandidates(names, descriptions []string, prefix, toComplete string) []string {
	var out []string
	for i, n := range names {
		c := prefix + n
		if !strings.HasPrefix(c, toComplete) {
			continue
		}
		if i < len(descriptions) && descriptions[i] != "" {
			c += "\t" + descriptions[i]
		}
		out = append(out, c)
	}
	return out
}

// namesOf are the name and description of each item (what a nameLister returns).
func namesOf[T any](items []T, describe func(*T) (name, description string)) (names, descriptions []string) {
	for i := range items {
		n, d := describe(&items[i])
		names, descriptions = append(names, n), append(descriptions, d)
	}
	return names, descriptions
}

// lister makes a nameLister of a List call and describe.
func lister[T any](list func(ctx context.Context, c *Clients, ns string) ([]T, error), describe func(*T) (string, string)) nameLister {
	return func(ctx context.Context, c *Clients, ns string) ([]string, []string, error) {
		items, err := list(ctx, c, ns)
		if err != nil {
			return nil, nil, err
		}
		names, descs := namesOf(items, describe)
		return names, descs, nil
	}
}

var (
	listEnhancedStatefulSets = lister(func(ctx context.Context, c *Clients, ns string) ([]jkev1alpha1.EnhancedStatefulSet, error) {
		l, err := c.StaticIP.JkeV1alpha1().EnhancedStatefulSets(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return nil, err
		}
		return l.Items, nil
	}, func(s *jkev1alpha1.EnhancedStatefulSet) (string, string) { return s.Name, "" })

	listStatefulSetGrids = lister(func(ctx context.Context, c *Clients, ns string) ([]superedgev1.StatefulSetGrid, error) {
		l, err := c.StaticIP.SuperedgeV1().StatefulSetGrids(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return nil, err
		}
		return l.Items, nil
	}, func(g *superedgev1.StatefulSetGrid) (string, string) { return g.Name, "" })

	listNodes = lister(func(ctx context.Context, c *Clients, _ string) ([]corev1.Node, error) {
		l, err := c.Kube.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
		if err != nil {
			return nil, err
		}
		return l.Items, nil
	}, func(n *corev1.Node) (string, string) { return n.Name, "" })

	listIPRanges = lister(func(ctx context.Context, c *Clients, _ string) ([]jkev1.IPRange, error) {
		l, err := c.StaticIP.JkeV1().IPRanges().List(ctx, metav1.ListOptions{})
		if err != nil {
			return nil, err
		}
		return l.Items, nil
	}, func(r *jkev1.IPRange) (string, string) {
		return r.Name, fmt.Sprintf("%s on %s", r.Spec.CIDR, none(r.Spec.Node))
	})

	listIPPools = lister(func(ctx context.Context, c *Clients, _ string) ([]jkev1.IPPool, error) {
		l, err := c.StaticIP.JkeV1().IPPools().List(ctx, metav1.ListOptions{})
		if err != nil {
			return nil, err
		}
		return l.Items, nil
	}, func(p *jkev1.IPPool) (string, string) { return p.Name, strings.Join(p.Spec.CIDRs, ",") })

	listNodeFailovers = lister(func(ctx context.Context, c *Clients, _ string) ([]jkev1alpha1.NodeFailover, error) {
		l, err := c.StaticIP.JkeV1alpha1().NodeFailovers().List(ctx, metav1.ListOptions{})
		if err != nil {
			return nil, err
		}
		return l.Items, nil
	}, func(f *jkev1alpha1.NodeFailover) (string, string) { return f.Name, string(f.Status.Phase) })
)

// listStaticIPAddresses are the addresses StaticIPs record (all namespaces unless -n), each
// described by its StaticIP: what `ips --ip` completes.
func listStaticIPAddresses(ctx context.Context, c *Clients, ns string) ([]string, []string, error) {
	l, err := c.StaticIP.JkeV1().StaticIPs(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, nil, err
	}
	var ips, descs []string
	for _, s := range l.Items {
		for _, a := range s.Spec.AddressList() {
			ips = append(ips, a.String())
			descs = append(descs, "StaticIP "+nsName(s.Namespace, s.Name))
		}
	}
	return ips, descs, nil
}

// inAllNamespaces is list over every namespace, whatever the command's namespace.
func inAllNamespaces(list nameLister) nameLister {
	return func(ctx context.Context, c *Clients, _ string) ([]string, []string, error) {
		return list(ctx, c, "")
	}
}

// rolloutTypes are what a rollout argument's TYPE completes to.
var rolloutTypes = []string{"ests", "enhancedstatefulset", "ssg", "statefulsetgrid"}

// completeRolloutRef completes TYPE/NAME or TYPE NAME of a rollout subcommand: the types,
// then the names of EnhancedStatefulSets or StatefulSetGrids in the namespace.
func (o *Options) completeRolloutRef(cmd *cobra.Command, args []string, toComplete string) ([]string, cobra.ShellCompDirective) {
	lister := func(kind string) nameLister {
		ref, err := ParseRolloutRef([]string{kind, "x"})
		switch {
		case err != nil:
			return nil
		case ref.Grid:
			return listStatefulSetGrids
		}
		return listEnhancedStatefulSets
	}
	switch len(args) {
	case 0:
		if kind, _, ok := strings.Cut(toComplete, "/"); ok {
			if l := lister(kind); l != nil {
				return o.completeNames(cmd.Context(), l, kind+"/", toComplete)
			}
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		return CompletionCandidates(rolloutTypes, nil, "", toComplete), cobra.ShellCompDirectiveNoFileComp
	case 1:
		if strings.Contains(args[0], "/") {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		if l := lister(args[0]); l != nil {
			return o.completeNames(cmd.Context(), l, "", toComplete)
		}
	}
	return nil, cobra.ShellCompDirectiveNoFileComp
}

// flagCompletion registers a flag's completion from list.
func (o *Options) flagCompletion(cmd *cobra.Command, flag string, list nameLister) {
	_ = cmd.RegisterFlagCompletionFunc(flag, func(cmd *cobra.Command, _ []string, toComplete string) ([]string, cobra.ShellCompDirective) {
		return o.completeNames(cmd.Context(), list, "", toComplete)
	})
}
