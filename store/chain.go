package store

import "github.com/respgate/respgate/wire"

// Items flattens the chain into the history it stands for: each turn's input items then its
// output items, oldest turn first: the order rehydration replays a chain in.
func (c *Chain) Items() []wire.Item {
	n := 0
	for _, t := range c.Turns {
		n += len(t.Input) + len(t.Output)
	}
	out := make([]wire.Item, 0, n)
	for _, t := range c.Turns {
		out = append(append(out, t.Input...), t.Output...)
	}
	return out
}
