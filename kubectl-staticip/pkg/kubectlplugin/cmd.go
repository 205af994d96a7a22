// Package kubectlplugin is the kubectl plugin kubectl-staticip: `kubectl staticip ips|check|
// release|rollout|failover|version|completion`. The commands read and patch API objects only
// (IPRanges, IPPools, StaticIPs, pods, NodeFailovers, EnhancedStatefulSets and their
// ControllerRevisions; release deletes orphaned StaticIPs); the decisions are pure functions
// (ips.go, check.go, leaks.go, release.go, rollout.go, failover.go, completion.go)
// table-tested against fake clientsets; this file is the cobra and client wiring.
package kubectlplugin

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"time"

	"github.com/spf13/cobra"
	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	"k8s.io/client-go/kubernetes"
	"k8s.io/kubectl/pkg/util/templates"
	"sigs.k8s.io/yaml"

	"github.com/staticip/staticip/apis/generated/clientset/versioned"
	jkev1alpha1 "github.com/staticip/staticip/apis/jke/v1alpha1"
)

// Options are the plugin's global state: kubectl's connection flags (--kubeconfig, --context,
// -n/--namespace, ...), the I/O streams, and how clients are made (tests pass fakes).
type Options struct {
	ConfigFlags *genericclioptions.ConfigFlags
	genericiooptions.IOStreams
	// NewClients makes the API clients; nil: from ConfigFlags.
	NewClients func() (*Clients, error)
	// Now is the clock (restartedAt, ages); nil: time.Now.
	Now func() time.Time
}

// ExitError carries a command's exit code; an empty message means the command already
// printed what went wrong (check prints its problems).
type ExitError struct {
	Code int
	Msg  string
}

func (e *ExitError) Error() string { return e.Msg }

// HandleError prints err as kubectl does ("error: ...") and returns the exit code.
func HandleError(stderr io.Writer, err error) int {
	if err == nil {
		return 0
	}
	var ee *ExitError
	if errors.As(err, &ee) {
		if ee.Msg != "" {
			fmt.Fprintf(stderr, "error: %s\n", ee.Msg)
		}
		return ee.Code
	}
	fmt.Fprintf(stderr, "error: %v\n", err)
	return 1
}

func (o *Options) clients() (*Clients, error) {
	if o.NewClients != nil {
		return o.NewClients()
	}
	cfg, err := o.ConfigFlags.ToRESTConfig()
	if err != nil {
		return nil, err
	}
	kube, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	sip, err := versioned.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	return &Clients{Kube: kube, StaticIP: sip}, nil
}

func (o *Options) now() time.Time {
	if o.Now != nil {
		return o.Now()
	}
	return time.Now()
}

func (o *Options) namespace() (string, error) {
	ns, _, err := o.ConfigFlags.ToRawKubeConfigLoader().Namespace()
	return ns, err
}

// NewCommand is `kubectl staticip` with connection flags from kubeconfig.
func NewCommand(streams genericiooptions.IOStreams) *cobra.Command {
	return NewCommandWithOptions(&Options{ConfigFlags: genericclioptions.NewConfigFlags(true), IOStreams: streams})
}

// NewCommandWithOptions is `kubectl staticip` with the given options.
func NewCommandWithOptions(o *Options) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "kubectl-staticip",
		Short: "Inspect and operate staticip: pod IPs, IPAM audit, EnhancedStatefulSet and StatefulSetGrid rollouts, node failover",
		Long: templates.LongDesc(`
			Inspect and operate staticip, the fixed pod IP system.

			The commands read the API objects the staticip agents and controllers maintain
			(IPRanges, IPPools, StaticIPs, pods, NodeFailovers, EnhancedStatefulSets and their
			ControllerRevisions). They use your kubeconfig like kubectl does.`),
		Example: templates.Examples(`
			# Every allocated and reserved IP, and the counts of each IPRange
			kubectl staticip ips

			# Audit IPAM for duplicate and leaked IPs (exit code 1 on a problem)
			kubectl staticip check

			# Who holds an address, and since when
			kubectl staticip ips --ip 10.244.1.5

			# Free the leaked addresses of a check report (asks first)
			kubectl staticip check -o json > report.json
			kubectl staticip release --from-report report.json

			# Roll an EnhancedStatefulSet back to its previous revision
			kubectl staticip rollout undo ests/web`),
		Annotations:   map[string]string{cobra.CommandDisplayNameAnnotation: "kubectl staticip"},
		SilenceErrors: true,
		SilenceUsage:  true,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return cmd.Help()
		},
	}
	cmd.SetIn(o.In)
	cmd.SetOut(o.Out)
	cmd.SetErr(o.ErrOut)
	o.ConfigFlags.AddFlags(cmd.PersistentFlags())
	cmd.AddCommand(newIPsCommand(o), newCheckCommand(o), newReleaseCommand(o), newRolloutCommand(o), newFailoverCommand(o), newBGPCommand(o), newVersionCommand(o))
	return cmd
}

// addOutput registers -o/--output with the formats a command supports.
func addOutput(cmd *cobra.Command, p *string, formats string) {
	cmd.Flags().StringVarP(p, "output", "o", "", "Output format. One of: ("+formats+").")
}

func checkOutput(out string, allowed ...string) error {
	for _, a := range append(allowed, "") {
		if out == a {
			return nil
		}
	}
	return fmt.Errorf("unable to match a printer suitable for the output format %q, allowed formats are: %v", out, allowed)
}

// printStructured writes v as indented JSON or as YAML.
func printStructured(out io.Writer, format string, v any) error {
	if format == "yaml" {
		b, err := yaml.Marshal(v)
		if err != nil {
			return err
		}
		_, err = out.Write(b)
		return err
	}
	b, err := json.MarshalIndent(v, "", "    ")
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(out, "%s\n", b)
	return err
}

func newIPsCommand(o *Options) *cobra.Command {
	var f IPFilter
	var output, ip string
	var all bool
	cmd := &cobra.Command{
		Use:   "ips [--node NODE] [--range RANGE] [--pool POOL] [--ip ADDRESS]",
		Short: "List every allocated and reserved IP and the counts of each IPRange",
		Long: templates.LongDesc(`
			List the IPRanges with the counts their owning agents report (total, used, reserved,
			free), then every address that is allocated (a live pod holds it) or reserved (a
			StaticIP keeps it for a pod that is absent; the StaticIP is named).

			With --ip: that one address — the pod that holds it (and since when it runs), the
			StaticIP that records it (created when, its phase), its IPRange, pool and node, or
			that it is free or outside every range.

			Pods and StaticIPs of all namespaces are listed unless -n/--namespace is given.`),
		Example: templates.Examples(`
			# All ranges and addresses
			kubectl staticip ips

			# The addresses of one node, with pools and Synced
			kubectl staticip ips --node node-1 -o wide

			# One pool's ranges and addresses as JSON
			kubectl staticip ips --pool default -o json

			# Which pod, StaticIP, range and node hold an address, and since when
			kubectl staticip ips --ip 10.244.1.5`),
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := checkOutput(output, "json", "yaml", "wide"); err != nil {
				return err
			}
			if ip != "" {
				a, err := netip.ParseAddr(ip)
				if err != nil {
					return fmt.Errorf("--ip %q is not an IP address", ip)
				}
				f.IP = a.Unmap()
			}
			ns := ""
			if cmd.Flags().Changed("namespace") && !all {
				var err error
				if ns, err = o.namespace(); err != nil {
					return err
				}
			}
			c, err := o.clients()
			if err != nil {
				return err
			}
			ctx := cmd.Context()
			if f.Pool != "" {
				if _, err := c.StaticIP.JkeV1().IPPools().Get(ctx, f.Pool, metav1.GetOptions{}); err != nil {
					return err
				}
			}
			s, err := loadSnapshot(ctx, c, ns)
			if err != nil {
				return err
			}
			rep := BuildIPReport(s, f)
			if output == "json" || output == "yaml" {
				return printStructured(o.Out, output, rep)
			}
			if f.IP.IsValid() {
				return PrintIPDescription(o.Out, f.IP, rep, o.now())
			}
			return PrintIPReport(o.Out, rep, output == "wide")
		},
	}
	cmd.Flags().StringVar(&f.Node, "node", "", "Only the ranges owned by and the addresses on this node.")
	cmd.Flags().StringVar(&f.Range, "range", "", "Only this IPRange and its addresses.")
	cmd.Flags().StringVar(&f.Pool, "pool", "", "Only the ranges cut from this IPPool and their addresses.")
	cmd.Flags().StringVar(&ip, "ip", "", "Only this address: who holds it and since when, its range and node.")
	o.flagCompletion(cmd, "node", listNodes)
	o.flagCompletion(cmd, "range", listIPRanges)
	o.flagCompletion(cmd, "pool", listIPPools)
	// ips reads all namespaces unless -n is given; so does the completion of --ip.
	_ = cmd.RegisterFlagCompletionFunc("ip", func(cmd *cobra.Command, _ []string, toComplete string) ([]string, cobra.ShellCompDirective) {
		list := listStaticIPAddresses
		if !cmd.Flags().Changed("namespace") || all {
			list = inAllNamespaces(list)
		}
		return o.completeNames(cmd.Context(), list, "", toComplete)
	})
	cmd.Flags().BoolVarP(&all, "all-namespaces", "A", false, "Pods and StaticIPs of all namespaces (the default unless -n is given).")
	addOutput(cmd, &output, "json, yaml, wide")
	return cmd
}

func newCheckCommand(o *Options) *cobra.Command {
	var output string
	cmd := &cobra.Command{
		Use:   "check",
		Short: "Audit IPRanges, StaticIPs and pods for duplicate and leaked IPs",
		Long: templates.LongDesc(`
			Audit the IP address management across all namespaces, as calicoctl ipam check does.

			Errors: an IP held by two live pods; a pod IP outside every IPRange; a pod on one
			node holding an IP of a range another node owns; two StaticIPs with the same IP; a
			StaticIP whose IP lies outside every IPRange; overlapping IPRanges; an IPRange whose
			Synced condition is False.

			Warnings: a pod holding an IP of a range a running NodeFailover moved away from its
			node (the pod is being replaced), or of an unassigned range (its node drains it); a
			StaticIP that keeps an address for a pod and an EnhancedStatefulSet or StatefulSet
			that both no longer exist (OrphanedStaticIP: leaked, unless kept on purpose for the
			workload's return; release --from-report frees it).

			Each problem is printed on one line naming the objects. The exit code is 1 when an
			error was found and 0 otherwise (warnings alone exit 0).`),
		Example: templates.Examples(`
			# Audit the cluster
			kubectl staticip check

			# The report as JSON, for a script or for release --from-report
			kubectl staticip check -o json > report.json`),
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := checkOutput(output, "json", "yaml"); err != nil {
				return err
			}
			c, err := o.clients()
			if err != nil {
				return err
			}
			s, err := loadSnapshot(cmd.Context(), c, "")
			if err != nil {
				return err
			}
			if s.Workloads, err = loadWorkloads(cmd.Context(), c); err != nil {
				return err
			}
			res := Audit(s)
			now := metav1.NewTime(o.now().UTC().Truncate(time.Second))
			res.GeneratedAt = &now
			if output != "" {
				err = printStructured(o.Out, output, res)
			} else {
				err = PrintAudit(o.Out, res)
			}
			if err != nil {
				return err
			}
			if res.Errors() > 0 {
				return &ExitError{Code: 1}
			}
			return nil
		},
	}
	addOutput(cmd, &output, "json, yaml")
	return cmd
}

func newFailoverCommand(o *Options) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "failover",
		Short: "Show node failover records",
		Long:  templates.LongDesc(`Show the NodeFailover records the failover controller keeps while it moves a failed node's IP ranges and StaticIPs.`),
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return cmd.Help()
		},
	}
	var output string
	status := &cobra.Command{
		Use:   "status [NODEFAILOVER...]",
		Short: "Show each NodeFailover: node, phase, target and what it waits for",
		Long: templates.LongDesc(`
			Show each NodeFailover: the failed node, the last phase done, the target node, and
			what the migration waits for (the Stopped, Paused or Deleting condition when True,
			otherwise the Progressing condition's reason and message).`),
		Example: templates.Examples(`
			# All failovers
			kubectl staticip failover status

			# One failover, with moved ranges and StaticIPs and the last error
			kubectl staticip failover status node-3 -o wide`),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := checkOutput(output, "json", "yaml", "wide"); err != nil {
				return err
			}
			c, err := o.clients()
			if err != nil {
				return err
			}
			list, err := c.StaticIP.JkeV1alpha1().NodeFailovers().List(cmd.Context(), metav1.ListOptions{})
			if err != nil {
				return err
			}
			items, err := named(list.Items, args, func(fo jkev1alpha1.NodeFailover) string { return fo.Name }, "nodefailovers.jke.jdcloud.com")
			if err != nil {
				return err
			}
			if output == "json" || output == "yaml" {
				out := &jkev1alpha1.NodeFailoverList{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "List"}, Items: items}
				for i := range out.Items {
					out.Items[i].APIVersion, out.Items[i].Kind = jkev1alpha1.SchemeGroupVersion.String(), "NodeFailover"
				}
				return printStructured(o.Out, output, out)
			}
			return PrintFailovers(o.Out, items, output == "wide", o.now())
		},
	}
	addOutput(status, &output, "json, yaml, wide")
	status.ValidArgsFunction = func(cmd *cobra.Command, _ []string, toComplete string) ([]string, cobra.ShellCompDirective) {
		return o.completeNames(cmd.Context(), listNodeFailovers, "", toComplete)
	}
	cmd.AddCommand(status)
	return cmd
}

func newRolloutCommand(o *Options) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "rollout SUBCOMMAND",
		Short: "Manage the rollout of an EnhancedStatefulSet or a StatefulSetGrid",
		Long: templates.LongDesc(`
			Manage the rollout of an EnhancedStatefulSet (enhancedstatefulset, ests), as
			kubectl rollout manages a StatefulSet: its revisions are the ControllerRevisions the
			EnhancedStatefulSet controller keeps (spec.revisionHistoryLimit of them). Or of a
			StatefulSetGrid (statefulsetgrid, ssg): its revisions are those of its unit
			StatefulSets, one per node unit, numbered per unit; pause and resume are not
			available (a StatefulSet cannot be paused).`),
		Example: templates.Examples(`
			# Roll back to the previous revision
			kubectl staticip rollout undo ests/web

			# Watch the rollout until it completes
			kubectl staticip rollout status ests/web`),
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return cmd.Help() },
	}
	cmd.AddCommand(newRolloutHistory(o), newRolloutUndo(o), newRolloutStatus(o),
		newRolloutPause(o, true), newRolloutPause(o, false), newRolloutRestart(o))
	for _, sub := range cmd.Commands() {
		sub.ValidArgsFunction = o.completeRolloutRef
	}
	return cmd
}

// getSet gets the EnhancedStatefulSet name in the namespace.
func (o *Options) getSet(ctx context.Context, name string) (*Clients, *jkev1alpha1.EnhancedStatefulSet, error) {
	ns, err := o.namespace()
	if err != nil {
		return nil, nil, err
	}
	c, err := o.clients()
	if err != nil {
		return nil, nil, err
	}
	set, err := c.StaticIP.JkeV1alpha1().EnhancedStatefulSets(ns).Get(ctx, name, metav1.GetOptions{})
	return c, set, err
}

// rolloutRunE is the RunE of a rollout subcommand taking TYPE NAME or TYPE/NAME: a
// StatefulSetGrid goes to onGrid by name, an EnhancedStatefulSet, read from the API server in
// the command's namespace, to onSet.
func (o *Options) rolloutRunE(onGrid func(ctx context.Context, name string) error,
	onSet func(ctx context.Context, c *Clients, set *jkev1alpha1.EnhancedStatefulSet) error) func(*cobra.Command, []string) error {
	return func(cmd *cobra.Command, args []string) error {
		ctx := cmd.Context()
		ref, err := ParseRolloutRef(args)
		if err != nil {
			return err
		}
		if ref.Grid {
			return onGrid(ctx, ref.Name)
		}
		c, set, err := o.getSet(ctx, ref.Name)
		if err != nil {
			return err
		}
		return onSet(ctx, c, set)
	}
}

// patchSet patches set and prints kubectl's "<resource>/<name> <what>".
func (o *Options) patchSet(ctx context.Context, c *Clients, set *jkev1alpha1.EnhancedStatefulSet, pt types.PatchType, patch []byte, what string) error {
	if _, err := c.StaticIP.JkeV1alpha1().EnhancedStatefulSets(set.Namespace).Patch(ctx, set.Name, pt, patch, metav1.PatchOptions{}); err != nil {
		return err
	}
	_, err := fmt.Fprintf(o.Out, "%s/%s %s\n", estsResource, set.Name, what)
	return err
}

// revisions lists the ControllerRevisions set controls, selected by its selector as kubectl does.
func revisions(ctx context.Context, c *Clients, set *jkev1alpha1.EnhancedStatefulSet) ([]*appsv1.ControllerRevision, error) {
	sel, err := metav1.LabelSelectorAsSelector(set.Spec.Selector)
	if err != nil {
		return nil, fmt.Errorf("failed to create selector for %s %s: %w", estsResource, set.Name, err)
	}
	list, err := c.Kube.AppsV1().ControllerRevisions(set.Namespace).List(ctx, metav1.ListOptions{LabelSelector: sel.String()})
	if err != nil {
		return nil, fmt.Errorf("unable to find history controlled by %s %s: %w", estsResource, set.Name, err)
	}
	return ControlledRevisions(list.Items, set), nil
}

const rolloutArgs = "(TYPE NAME | TYPE/NAME)"

func newRolloutHistory(o *Options) *cobra.Command {
	var revision int64
	var output, unit string
	cmd := &cobra.Command{
		Use:   "history " + rolloutArgs + " [flags]",
		Short: "View rollout history",
		Long: templates.LongDesc(`
			View the revisions of an EnhancedStatefulSet: its ControllerRevisions, oldest first. For
			a StatefulSetGrid: the revisions of each unit StatefulSet, numbered per unit.`),
		Example: templates.Examples(`
			# View the rollout history of an EnhancedStatefulSet
			kubectl staticip rollout history ests/web

			# With revision names, current/update markers and images
			kubectl staticip rollout history ests/web -o wide

			# View the pod template of revision 3
			kubectl staticip rollout history ests/web --revision=3

			# View the revisions of every unit StatefulSet of a StatefulSetGrid
			kubectl staticip rollout history ssg/db`),
		Args:    cobra.RangeArgs(1, 2),
		PreRunE: func(*cobra.Command, []string) error { return checkOutput(output, "json", "yaml", "wide") },
		RunE: o.rolloutRunE(func(ctx context.Context, name string) error {
			return o.runGridHistory(ctx, name, unit, revision, output)
		}, func(ctx context.Context, c *Clients, set *jkev1alpha1.EnhancedStatefulSet) error {
			revs, err := revisions(ctx, c, set)
			if err != nil {
				return err
			}
			if output == "json" || output == "yaml" {
				list := &appsv1.ControllerRevisionList{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "List"}}
				for _, r := range revs {
					if revision > 0 && r.Revision != revision {
						continue
					}
					r.APIVersion, r.Kind = "apps/v1", "ControllerRevision"
					list.Items = append(list.Items, *r)
				}
				return printStructured(o.Out, output, list)
			}
			return PrintHistory(o.Out, set, revs, revision, output == "wide")
		}),
	}
	cmd.Flags().Int64Var(&revision, "revision", 0, "See the details, including podTemplate of the revision specified")
	cmd.Flags().StringVar(&unit, "unit", "", "StatefulSetGrid: the node unit whose revision numbers --revision means (default: the unit with the longest history)")
	addOutput(cmd, &output, "json, yaml, wide")
	return cmd
}

func newRolloutUndo(o *Options) *cobra.Command {
	var toRevision int64
	var unit string
	cmd := &cobra.Command{
		Use:   "undo " + rolloutArgs + " [flags]",
		Short: "Undo a previous rollout",
		Long: templates.LongDesc(`
			Roll back to a previous rollout: the pod template of the chosen ControllerRevision
			(default: the previous one) replaces the EnhancedStatefulSet's template, and the
			controller rolls the pods to it under the set's update strategy. For a StatefulSetGrid:
			the template of a unit's revision, without what the grid controller adds for the unit,
			replaces the grid's template, and the grid controller hands it to every unit.`),
		Example: templates.Examples(`
			# Roll back to the previous revision
			kubectl staticip rollout undo ests/web

			# Roll back to revision 3
			kubectl staticip rollout undo ests/web --to-revision=3

			# Roll a StatefulSetGrid back to revision 2 of its unit zone-a
			kubectl staticip rollout undo ssg/db --unit=zone-a --to-revision=2`),
		Args: cobra.RangeArgs(1, 2),
		RunE: o.rolloutRunE(func(ctx context.Context, name string) error {
			return o.runGridUndo(ctx, name, unit, toRevision)
		}, func(ctx context.Context, c *Clients, set *jkev1alpha1.EnhancedStatefulSet) error {
			revs, err := revisions(ctx, c, set)
			if err != nil {
				return err
			}
			rev, err := FindRevision(toRevision, revs)
			if err != nil {
				return err
			}
			patch, done, err := UndoPatch(set, rev)
			if err != nil {
				return err
			}
			if done {
				_, err = fmt.Fprintf(o.Out, "%s/%s skipped rollback (current template already matches revision %d)\n", estsResource, set.Name, rev.Revision)
				return err
			}
			if err := o.patchSet(ctx, c, set, types.JSONPatchType, patch, "rolled back"); err != nil {
				return fmt.Errorf("failed restoring revision %d: %w", rev.Revision, err)
			}
			return nil
		}),
	}
	cmd.Flags().Int64Var(&toRevision, "to-revision", 0, "The revision to rollback to. Default to 0 (last revision).")
	cmd.Flags().StringVar(&unit, "unit", "", "StatefulSetGrid: the node unit whose revision numbers --to-revision means (default: the unit with the longest history)")
	return cmd
}

func newRolloutStatus(o *Options) *cobra.Command {
	watch := true
	var timeout time.Duration
	cmd := &cobra.Command{
		Use:   "status " + rolloutArgs + " [flags]",
		Short: "Show the status of the rollout",
		Long: templates.LongDesc(`
			Show the status of the rollout. By default it waits until the rollout completes
			(use --watch=false to print the status once). A paused rollout fails: it will not
			complete until it is resumed.`),
		Example: templates.Examples(`
			# Watch the rollout status of an EnhancedStatefulSet
			kubectl staticip rollout status ests/web

			# Watch the rollouts of all unit StatefulSets of a StatefulSetGrid
			kubectl staticip rollout status ssg/db`),
		Args: cobra.RangeArgs(1, 2),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			ref, err := ParseRolloutRef(args)
			if err != nil {
				return err
			}
			name := ref.Name
			ns, err := o.namespace()
			if err != nil {
				return err
			}
			c, err := o.clients()
			if err != nil {
				return err
			}
			last := ""
			status := func(ctx context.Context) (string, bool, error) {
				if ref.Grid {
					return o.gridStatus(ctx, name)
				}
				set, err := c.StaticIP.JkeV1alpha1().EnhancedStatefulSets(ns).Get(ctx, name, metav1.GetOptions{})
				if err != nil {
					return "", false, err
				}
				return RolloutStatus(set)
			}
			check := func(ctx context.Context) (bool, error) {
				msg, done, err := status(ctx)
				if err != nil {
					return false, err
				}
				if msg != last {
					fmt.Fprint(o.Out, msg)
					last = msg
				}
				return done || !watch, nil
			}
			if timeout > 0 {
				return wait.PollUntilContextTimeout(ctx, time.Second, timeout, true, check)
			}
			return wait.PollUntilContextCancel(ctx, time.Second, true, check)
		},
	}
	cmd.Flags().BoolVarP(&watch, "watch", "w", true, "Watch the status of the rollout until it's done.")
	cmd.Flags().DurationVar(&timeout, "timeout", 0, "The length of time to wait before ending watch, zero means never.")
	return cmd
}

func newRolloutPause(o *Options, pause bool) *cobra.Command {
	verb, done, example := "pause", "paused", "Mark the EnhancedStatefulSet as paused: no pod moves to a new revision until it is resumed (scaling still works)"
	if !pause {
		verb, done, example = "resume", "resumed", "Resume a paused EnhancedStatefulSet: the rolling update continues"
	}
	return &cobra.Command{
		Use:     verb + " " + rolloutArgs,
		Short:   "Mark the provided resource as " + done,
		Long:    templates.LongDesc(example + ` (spec.updateStrategy.rollingUpdate.paused).`),
		Example: templates.Examples(fmt.Sprintf("\n# %s the rollout of ests/web\nkubectl staticip rollout %s ests/web", verb, verb)),
		Args:    cobra.RangeArgs(1, 2),
		RunE: o.rolloutRunE(func(_ context.Context, name string) error {
			return errGridPause(name)
		}, func(ctx context.Context, c *Clients, set *jkev1alpha1.EnhancedStatefulSet) error {
			patch, changed, err := PausePatch(set, pause)
			if err != nil {
				return err
			}
			if !changed {
				if pause {
					return fmt.Errorf("%s %q is already paused", "enhancedstatefulsets.jke.jdcloud.com", set.Name)
				}
				return fmt.Errorf("%s %q is not paused", "enhancedstatefulsets.jke.jdcloud.com", set.Name)
			}
			return o.patchSet(ctx, c, set, types.MergePatchType, patch, done)
		}),
	}
}

func newRolloutRestart(o *Options) *cobra.Command {
	return &cobra.Command{
		Use:   "restart " + rolloutArgs,
		Short: "Restart a resource",
		Long: templates.LongDesc(`
			Restart an EnhancedStatefulSet: its pod template gets the annotation
			kubectl.kubernetes.io/restartedAt, so every pod is replaced by a rolling update
			(and keeps its IP).`),
		Example: templates.Examples(`
			# Restart an EnhancedStatefulSet
			kubectl staticip rollout restart ests/web

			# Restart every unit StatefulSet of a StatefulSetGrid
			kubectl staticip rollout restart ssg/db`),
		Args: cobra.RangeArgs(1, 2),
		RunE: o.rolloutRunE(o.runGridRestart, func(ctx context.Context, c *Clients, set *jkev1alpha1.EnhancedStatefulSet) error {
			patch, err := RestartPatch(set, o.now().Format(time.RFC3339))
			if err != nil {
				return err
			}
			return o.patchSet(ctx, c, set, types.MergePatchType, patch, "restarted")
		}),
	}
}

// named keeps the items whose names args lists (all of them when args is empty), in the
// list's order; a name no item has is an error, as kubectl get's NotFound for resource.
func named[T any](items []T, args []string, name func(T) string, resource string) ([]T, error) {
	if len(args) == 0 {
		return items, nil
	}
	want := map[string]bool{}
	for _, a := range args {
		want[a] = true
	}
	var out []T
	for _, it := range items {
		if want[name(it)] {
			out = append(out, it)
			delete(want, name(it))
		}
	}
	for _, a := range args {
		if want[a] {
			return nil, fmt.Errorf("%s %q not found", resource, a)
		}
	}
	return out, nil
}
