package kubectlplugin

import (
	"context"
	"fmt"
	"strings"

	"github.com/spf13/cobra"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
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

func listEnhancedStatefulSets(ctx context.Context, c *Clients, ns string) ([]string, []string, error) {
	l, err := c.StaticIP.JkeV1alpha1().EnhancedStatefulSets(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, nil, err
	}
	var names []string
	for _, s := range l.Items {
		names = append(names, s.Name)
	}
	return names, nil, nil
}

func listStatefulSetGrids(ctx context.Context, c *Clients, ns string) ([]string, []string, error) {
	l, err := c.StaticIP.SuperedgeV1().StatefulSetGrids(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, nil, err
	}
	var names []string
	for _, s := range l.Items {
		names = append(names, s.Name)
	}
	return names, nil, nil
}

func listNodes(ctx context.Context, c *Clients, _ string) ([]string, []string, error) {
	l, err := c.Kube.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, nil, err
	}
	var names []string
	for _, n := range l.Items {
		names = append(names, n.Name)
	}
	return names, nil, nil
}

func listIPRanges(ctx context.Context, c *Clients, _ string) ([]string, []string, error) {
	l, err := c.StaticIP.JkeV1().IPRanges().List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, nil, err
	}
	var names, descs []string
	for _, r := range l.Items {
		names = append(names, r.Name)
		descs = append(descs, fmt.Sprintf("%s on %s", r.Spec.CIDR, none(r.Spec.Node)))
	}
	return names, descs, nil
}

func listIPPools(ctx context.Context, c *Clients, _ string) ([]string, []string, error) {
	l, err := c.StaticIP.JkeV1().IPPools().List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, nil, err
	}
	var names, descs []string
	for _, p := range l.Items {
		names = append(names, p.Name)
		descs = append(descs, strings.Join(p.Spec.CIDRs, ","))
	}
	return names, descs, nil
}

func listNodeFailovers(ctx context.Context, c *Clients, _ string) ([]string, []string, error) {
	l, err := c.StaticIP.JkeV1alpha1().NodeFailovers().List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, nil, err
	}
	var names, descs []string
	for _, f := range l.Items {
		names = append(names, f.Name)
		descs = append(descs, string(f.Status.Phase))
	}
	return names, descs, nil
}

// listStaticIPAddresses are the addresses StaticIPs record (all namespaces unless -n), each
// described by its StaticIP: what `ips --ip` completes.
func listStaticIPAddresses(ctx context.Context, c *Clients, ns string) ([]string, []string, error) {
	l, err := c.StaticIP.JkeV1().StaticIPs(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, nil, err
	}
	var ips, descs []string
	for _, s := range l.Items {
		if s.Spec.IP != "" {
			ips = append(ips, s.Spec.IP)
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
