package ipam

import "net/netip"

// The node's index and the pools are read by every allocation too: their
// decoding takes the fast path of blockjson.go, and falls back to
// encoding/json the same way.

// parseIndexJSON decodes data as json.Unmarshal into a new NodeIndex
// would, or reports false (see parseBlockJSON).
func parseIndexJSON(data []byte) (*NodeIndex, bool) {
	d := jsonParser{s: data}
	x := new(NodeIndex)
	var seen uint8
	ok := d.object(func(key []byte) bool {
		switch k := string(key); {
		case k == "node" && seen&1 == 0:
			seen |= 1
			s, ok := d.str()
			x.Node = string(s)
			return ok
		case k == "blocks" && seen&2 == 0:
			seen |= 2
			x.Blocks = []NodeBlock{}
			return d.array(func() bool {
				x.Blocks = append(x.Blocks, NodeBlock{})
				return d.nodeBlock(&x.Blocks[len(x.Blocks)-1])
			})
		case k == "borrowed" && seen&4 == 0:
			seen |= 4
			x.Borrowed = []BorrowedBlock{}
			return d.array(func() bool {
				x.Borrowed = append(x.Borrowed, BorrowedBlock{})
				return d.borrowedBlock(&x.Borrowed[len(x.Borrowed)-1])
			})
		}
		return false
	})
	return x, ok && d.i == len(d.s)
}

func (d *jsonParser) nodeBlock(e *NodeBlock) bool {
	var seen uint8
	return d.object(func(key []byte) bool {
		switch k := string(key); {
		case k == "cidr" && seen&1 == 0:
			seen |= 1
			return d.prefix(&e.CIDR)
		case k == "state" && seen&2 == 0:
			seen |= 2
			s, ok := d.str()
			e.State = AffinityState(s)
			return ok
		case k == "since" && seen&4 == 0:
			seen |= 4
			return d.time(&e.Since)
		}
		return false
	})
}

func (d *jsonParser) borrowedBlock(b *BorrowedBlock) bool {
	var seen uint8
	return d.object(func(key []byte) bool {
		switch k := string(key); {
		case k == "cidr" && seen&1 == 0:
			seen |= 1
			return d.prefix(&b.CIDR)
		case k == "ips" && seen&2 == 0:
			seen |= 2
			b.IPs = []netip.Addr{}
			return d.array(func() bool {
				s, ok := d.str()
				var a netip.Addr
				b.IPs = append(b.IPs, a)
				return ok && b.IPs[len(b.IPs)-1].UnmarshalText(s) == nil
			})
		}
		return false
	})
}

// prefix reads a string with netip.Prefix's UnmarshalText, as
// encoding/json does.
func (d *jsonParser) prefix(p *netip.Prefix) bool {
	s, ok := d.str()
	return ok && p.UnmarshalText(s) == nil
}

// parsePoolJSON decodes data as json.Unmarshal into a new Pool would, or
// reports false (see parseBlockJSON).
func parsePoolJSON(data []byte) (Pool, bool) {
	d := jsonParser{s: data}
	var p Pool
	var seen uint8
	ok := d.object(func(key []byte) bool {
		switch k := string(key); {
		case k == "name" && seen&1 == 0:
			seen |= 1
			s, ok := d.str()
			p.Name = string(s)
			return ok
		case k == "cidr" && seen&2 == 0:
			seen |= 2
			return d.prefix(&p.CIDR)
		case k == "blockSize" && seen&4 == 0:
			seen |= 4
			n, ok := d.uint()
			p.BlockSize = int(n)
			return ok
		case k == "nodeSelector" && seen&8 == 0:
			seen |= 8
			s, ok := d.str()
			p.NodeSelector = string(s)
			return ok
		case k == "disabled" && seen&16 == 0:
			seen |= 16
			return d.bool(&p.Disabled)
		}
		return false
	})
	return p, ok && d.i == len(d.s)
}

func (d *jsonParser) bool(v *bool) bool {
	for _, lit := range []string{"true", "false"} {
		if len(d.s)-d.i >= len(lit) && string(d.s[d.i:d.i+len(lit)]) == lit {
			d.i += len(lit)
			*v = lit == "true"
			return true
		}
	}
	return false
}
