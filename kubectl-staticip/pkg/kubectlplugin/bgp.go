package kubectlplugin

import (
	"fmt"
	"io"
	"sort"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/duration"
	"k8s.io/cli-runtime/pkg/printers"
	"k8s.io/kubectl/pkg/util/templates"

	jkev1 "github.com/staticip/staticip/apis/jke/v1"
)

func newBGPCommand(o *Options) *cobra.Command {
	var output string
	cmd := &cobra.Command{
		Use:   "bgp [NODE...]",
		Short: "Show per node what it announces over BGP and each session's state",
		Long: templates.LongDesc(`
			Show, from the nodes' BGPNodeStatus objects (each written by that node's
			staticip-agent), the prefixes each node announces and, per BGPPeer, the session's
			state and why it is down (the Established condition), with a warning when the peer's
			hold time is not shorter than the node-failover window (HoldTimeSafe).`),
		Example: templates.Examples(`
			# Every node that speaks BGP
			kubectl staticip bgp

			# One node, as YAML
			kubectl staticip bgp node-3 -o yaml`),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := checkOutput(output, "json", "yaml"); err != nil {
				return err
			}
			c, err := o.clients()
			if err != nil {
				return err
			}
			list, err := c.StaticIP.JkeV1().BGPNodeStatuses().List(cmd.Context(), metav1.ListOptions{})
			if err != nil {
				return err
			}
			items, err := named(list.Items, args, func(s jkev1.BGPNodeStatus) string { return s.Name }, "bgpnodestatuses.jke.jdcloud.com")
			if err != nil {
				return err
			}
			if output != "" {
				out := &jkev1.BGPNodeStatusList{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "List"}, Items: items}
				for i := range out.Items {
					out.Items[i].APIVersion, out.Items[i].Kind = jkev1.SchemeGroupVersion.String(), "BGPNodeStatus"
				}
				return printStructured(o.Out, output, out)
			}
			return PrintBGP(o.Out, items, o.now())
		},
	}
	addOutput(cmd, &output, "json, yaml")
	return cmd
}

// PrintBGP writes one line per node and peer: the node, the prefixes it announces, the peer,
// the session's state and since when, and why it is down or the hold-time warning.
func PrintBGP(out io.Writer, items []jkev1.BGPNodeStatus, now time.Time) error {
	if len(items) == 0 {
		_, err := fmt.Fprintln(out, "No node speaks BGP (no BGPNodeStatus: no BGPConfiguration \"default\", or no BGPPeer selects a node).")
		return err
	}
	sort.Slice(items, func(i, j int) bool { return items[i].Name < items[j].Name })
	w := printers.GetNewTabWriter(out)
	fmt.Fprintln(w, "NODE\tADVERTISED\tPEER\tPEER-IP\tSTATE\tSINCE\tPROBLEM")
	for _, s := range items {
		adv := none(strings.Join(s.Status.Advertised, ","))
		if len(s.Status.Peers) == 0 {
			fmt.Fprintf(w, "%s\t%s\t<none>\t\t\t\t\n", s.Name, adv)
		}
		for _, p := range s.Status.Peers {
			since := "<unknown>"
			if p.Since != nil {
				since = duration.HumanDuration(now.Sub(p.Since.Time))
			}
			var problems []string
			if c := meta.FindStatusCondition(p.Conditions, jkev1.BGPNodePeerEstablished); c != nil && c.Status != metav1.ConditionTrue {
				problems = append(problems, c.Reason)
			}
			if c := meta.FindStatusCondition(p.Conditions, jkev1.BGPPeerHoldTimeSafe); c != nil && c.Status == metav1.ConditionFalse {
				problems = append(problems, "HoldTimeNotShorterThanFailoverWindow")
			}
			fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", s.Name, adv, p.Name, p.PeerIP, p.State, since, none(strings.Join(problems, ",")))
		}
	}
	return w.Flush()
}
