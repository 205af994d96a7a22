package bench

import (
	"context"
	"fmt"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	jkev1 "github.com/staticip/staticip/apis/jke/v1"
)

// Manager starts staticip-controller-manager with the given controllers, no leader
// election, no metrics or health listeners (nothing may collide with other runs), and the
// client limits kube-controller-manager gets too (Options.ControllerQPS).
func (c *Cluster) Manager(name string, controllers string, extra ...string) (*Component, error) {
	return c.StartComponent(name, "staticip-controller-manager", func(kc string) []string {
		args := append([]string{"--kubeconfig=" + kc, "--controllers=" + controllers, "--leader-elect=false",
			"--metrics-bind-address=0", "--health-bind-address=0", LogVerbosity()}, c.controllerLimits()...)
		return append(args, extra...)
	})
}

// RangeAllocator (scenario 6): the IPPool range allocator alone while n nodes join; time
// from the first node's creation until every node has its block.
func (c *Cluster) RangeAllocator(ctx context.Context, n int) ([]Row, error) {
	if len(c.Nodes) > 0 {
		return nil, fmt.Errorf("the range allocator scenario runs first, on a cluster without nodes")
	}
	comp, err := c.Manager("ippool-allocator", "ippool")
	if err != nil {
		return nil, err
	}
	defer comp.Stop()
	if _, err := c.SIP.JkeV1().IPPools().Create(ctx, &jkev1.IPPool{ObjectMeta: metav1.ObjectMeta{Name: "scalebench"},
		Spec: jkev1.IPPoolSpec{CIDRs: []string{PoolCIDR}, BlockSize: ptr.To[int32](24)}}, metav1.CreateOptions{}); err != nil {
		return nil, err
	}
	t0 := time.Now()
	if err := c.AddNodes(ctx, n); err != nil {
		return nil, err
	}
	joined := time.Since(t0)
	err = poll(ctx, 30*time.Minute, func(ctx context.Context) (bool, error) {
		if done, perr := comp.Exited(); done {
			return false, fmt.Errorf("allocator exited: %v", perr)
		}
		r, err := c.Ranges(ctx)
		return err == nil && len(r) >= n, nil
	})
	if err != nil {
		return nil, fmt.Errorf("blocks: %w", err)
	}
	wall := time.Since(t0)
	row, err := Measure("range allocator", n, comp.Proc, comp.Proxy, wall)
	if err != nil {
		return nil, err
	}
	row.Note("%d blocks; nodes created+Ready in %.1f s, last block %.1f s later", n, joined.Seconds(), (wall - joined).Seconds())
	row.Note("%.1f requests/node", float64(row.Requests)/float64(n))
	row.Note("requests: %s", comp.Proxy.Counts())
	return []Row{row}, nil
}
