package bench

import (
	"context"
	"errors"
)

var errTODO = errors.New("not implemented yet")

// Failover is scenario 4.
func (c *Cluster) Failover(ctx context.Context, pods int) ([]Row, error) { return nil, errTODO }
