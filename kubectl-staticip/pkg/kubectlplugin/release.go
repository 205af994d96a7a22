package kubectlplugin

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/netip"
	"os"
	"strings"

	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/kubectl/pkg/util/templates"
	"sigs.k8s.io/yaml"

	jkev1 "github.com/staticip/staticip/apis/jke/v1"
)

// What `release` can do from a kubectl plugin: a node's addresses live in that node's bbolt
// database, which only its agent writes (no API reaches it). The agent keeps an address
// reserved exactly while a StaticIP records it (SyncReservations: the reservations are the
// StaticIPs' IPs), and its GC frees the allocations of gone pods by itself. So the one leak
// a user can fix through the API is a StaticIP that keeps an address for nothing — the pod
// and its workload both gone (check's OrphanedStaticIP) — and the fix is deleting that
// StaticIP: on its next sync the owning node's agent drops the reservation and the address
// is free. Everything else check reports (duplicates, pods outside ranges) names live
// holders, and is refused.

// ReleaseTarget is one orphaned StaticIP a check report names.
type ReleaseTarget struct {
	Namespace, Name, UID, IP string
}

func (t ReleaseTarget) String() string { return nsName(t.Namespace, t.Name) }

// ReleaseTargets reads check's JSON or YAML report: the releasable problems become targets;
// the other problems that name an address are returned as skipped (release never touches
// them: a live pod or another record holds those).
func ReleaseTargets(report []byte) (targets []ReleaseTarget, skipped []string, err error) {
	var rep AuditResult
	if err := yaml.Unmarshal(report, &rep); err != nil {
		return nil, nil, fmt.Errorf("the report is not JSON or YAML: %w", err)
	}
	if rep.Kind != ReportKind {
		return nil, nil, fmt.Errorf("the report is not a `kubectl staticip check -o json` report (kind %q, want %q)", rep.Kind, ReportKind)
	}
	for _, p := range rep.Problems {
		if !p.Releasable || p.Kind != ProblemOrphanedStaticIP {
			if p.IP != "" {
				skipped = append(skipped, fmt.Sprintf("%s %s: not releasable (%s)", p.Kind, p.IP, p.Message))
			}
			continue
		}
		ns, name, ok := strings.Cut(p.StaticIP, "/")
		if !ok || ns == "" || name == "" || p.StaticIPUID == "" {
			return nil, nil, fmt.Errorf("%s %s: the report names no StaticIP namespace/name and UID", p.Kind, p.IP)
		}
		if _, err := netip.ParseAddr(p.IP); err != nil {
			return nil, nil, fmt.Errorf("%s of StaticIP %s: bad ip %q", p.Kind, p.StaticIP, p.IP)
		}
		targets = append(targets, ReleaseTarget{Namespace: ns, Name: name, UID: p.StaticIPUID, IP: p.IP})
	}
	return targets, skipped, nil
}

// LiveState is what release reads right before it deletes a target.
type LiveState struct {
	// StaticIP is the target's record now; nil: gone.
	StaticIP  *jkev1.StaticIP
	StaticIPs []jkev1.StaticIP // of all namespaces
	Pods      []corev1.Pod     // of all namespaces
	Workloads WorkloadSet
}

// RefuseRelease says why t must not be released now, "" when it may: the record must be the
// very one the report named (same UID and IP), no live pod may hold the address, no other
// StaticIP may record it, and the record must still be orphaned (no pod of its name, its
// workload gone).
func RefuseRelease(t ReleaseTarget, live LiveState) string {
	sip := live.StaticIP
	switch {
	case sip == nil:
		return fmt.Sprintf("StaticIP %s no longer exists (nothing to release)", t)
	case string(sip.UID) != t.UID:
		return fmt.Sprintf("StaticIP %s was recreated since the report (UID %s, the report's %s)", t, sip.UID, t.UID)
	case sip.Spec.IP != t.IP:
		return fmt.Sprintf("StaticIP %s records %s, the report %s", t, sip.Spec.IP, t.IP)
	}
	ip, err := netip.ParseAddr(t.IP)
	if err != nil {
		return fmt.Sprintf("bad ip %q", t.IP)
	}
	ip = ip.Unmap()
	for i := range live.Pods {
		p := &live.Pods[i]
		if !livePod(p) {
			continue
		}
		for _, a := range podIPs(p) {
			if a == ip {
				return fmt.Sprintf("pod %s holds %s", nsName(p.Namespace, p.Name), ip)
			}
		}
	}
	for _, other := range live.StaticIPs {
		if other.UID == sip.UID {
			continue
		}
		if a, err := netip.ParseAddr(other.Spec.IP); err == nil && a.Unmap() == ip {
			return fmt.Sprintf("StaticIP %s also records %s", nsName(other.Namespace, other.Name), ip)
		}
	}
	if orphaned(&Snapshot{Pods: live.Pods, Workloads: live.Workloads}, sip, nil) == "" {
		return fmt.Sprintf("StaticIP %s is no longer orphaned: its pod or its workload exists again", t)
	}
	return ""
}

// liveState reads what RefuseRelease decides on, fresh from the API server.
func liveState(ctx context.Context, c *Clients, t ReleaseTarget) (LiveState, error) {
	var live LiveState
	sip, err := c.StaticIP.JkeV1().StaticIPs(t.Namespace).Get(ctx, t.Name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
	case err != nil:
		return live, err
	default:
		live.StaticIP = sip
	}
	sips, err := c.StaticIP.JkeV1().StaticIPs("").List(ctx, metav1.ListOptions{})
	if err != nil {
		return live, fmt.Errorf("listing StaticIPs: %w", err)
	}
	live.StaticIPs = sips.Items
	pods, err := c.Kube.CoreV1().Pods("").List(ctx, metav1.ListOptions{})
	if err != nil {
		return live, fmt.Errorf("listing pods: %w", err)
	}
	live.Pods = pods.Items
	live.Workloads, err = loadWorkloads(ctx, c)
	return live, err
}

func newReleaseCommand(o *Options) *cobra.Command {
	var from string
	var yes bool
	cmd := &cobra.Command{
		Use:   "release --from-report FILE [--yes]",
		Short: "Free the leaked addresses a check report names (orphaned StaticIPs)",
		Long: templates.LongDesc(`
			Free the addresses that ` + "`kubectl staticip check -o json`" + ` reported as leaked:
			StaticIPs that keep an address for a pod and a workload that both no longer exist
			(OrphanedStaticIP). Releasing one deletes that StaticIP; the agent of its node then
			drops the reservation from the node's IPAM database on its next sync, and the
			address is free. A kubectl plugin cannot reach a node's database: allocations of
			gone pods are freed by the agents themselves, and nothing else can be released.

			It lists what it will release and asks for confirmation (--yes skips the
			question). Right before each release it reads the cluster again and refuses a
			StaticIP that was recreated or changed since the report, whose address a live pod
			holds or another StaticIP records, or whose pod or workload exists again. The exit
			code is 1 when anything was refused.`),
		Example: templates.Examples(`
			# Audit, review the report, then free the leaked addresses
			kubectl staticip check -o json > report.json
			kubectl staticip release --from-report report.json

			# Without the question (scripts)
			kubectl staticip release --from-report report.json --yes`),
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if from == "" {
				return fmt.Errorf("--from-report is required (the output of kubectl staticip check -o json)")
			}
			var raw []byte
			var err error
			if from == "-" {
				if !yes {
					return fmt.Errorf("--from-report - reads the report from stdin, which leaves nothing to confirm with: add --yes")
				}
				raw, err = io.ReadAll(o.In)
			} else {
				raw, err = os.ReadFile(from)
			}
			if err != nil {
				return err
			}
			targets, skipped, err := ReleaseTargets(raw)
			if err != nil {
				return fmt.Errorf("%s: %w", from, err)
			}
			for _, s := range skipped {
				fmt.Fprintf(o.Out, "skipped: %s\n", s)
			}
			if len(targets) == 0 {
				_, err := fmt.Fprintln(o.Out, "No releasable (orphaned StaticIP) addresses in the report.")
				return err
			}
			fmt.Fprintf(o.Out, "The report names %d leaked address(es):\n", len(targets))
			for _, t := range targets {
				fmt.Fprintf(o.Out, "  %s\tStaticIP %s (uid %s)\n", t.IP, t, t.UID)
			}
			if !yes {
				fmt.Fprintf(o.Out, "Release them (delete the StaticIPs)? [y/N]: ")
				line, _ := bufio.NewReader(o.In).ReadString('\n')
				if a := strings.ToLower(strings.TrimSpace(line)); a != "y" && a != "yes" {
					return &ExitError{Code: 1, Msg: "aborted: nothing released"}
				}
			}
			c, err := o.clients()
			if err != nil {
				return err
			}
			ctx := cmd.Context()
			refused := 0
			for _, t := range targets {
				live, err := liveState(ctx, c, t)
				if err != nil {
					return err
				}
				if why := RefuseRelease(t, live); why != "" {
					refused++
					fmt.Fprintf(o.Out, "refused %s: %s\n", t.IP, why)
					continue
				}
				// Preconditions: a change between the read above and this delete aborts it.
				uid, rv := types.UID(t.UID), live.StaticIP.ResourceVersion
				err = c.StaticIP.JkeV1().StaticIPs(t.Namespace).Delete(ctx, t.Name, metav1.DeleteOptions{
					Preconditions: &metav1.Preconditions{UID: &uid, ResourceVersion: &rv}})
				if err != nil {
					refused++
					fmt.Fprintf(o.Out, "refused %s: deleting StaticIP %s: %v\n", t.IP, t, err)
					continue
				}
				fmt.Fprintf(o.Out, "released %s: StaticIP %s deleted; node %s's agent frees the address on its next sync\n",
					t.IP, t, none(live.StaticIP.Spec.Node))
			}
			if refused > 0 {
				return &ExitError{Code: 1, Msg: fmt.Sprintf("%d of %d address(es) refused", refused, len(targets))}
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&from, "from-report", "", "The report of `kubectl staticip check -o json` (or -o yaml); - reads stdin (needs --yes).")
	cmd.Flags().BoolVarP(&yes, "yes", "y", false, "Release without asking.")
	return cmd
}
