package kubetest

import "errors"

// node is the real node of TierNode.
type node struct {
	hostIP string
}

func newNode(c *Cluster) (*node, error) { return nil, errors.New("TierNode: not yet") }

func (n *node) start() error { return errors.New("TierNode: not yet") }
