package bench

import (
	"context"
	"errors"
)

// Failover is scenario 4, not simulated yet: the failover controller waits for every other
// Ready node's staticip-agent to report the moved ranges and for the target's agent to
// reserve them, which on kwok means N simulated agents (README.md, "Not done").
func (c *Cluster) Failover(ctx context.Context, pods int) ([]Row, error) {
	return nil, errors.New("node failover is not simulated yet (tools/scalebench/README.md); tools/failoverbench measures it on the local cluster")
}
