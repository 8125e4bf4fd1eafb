package policyrules

import (
	"errors"
	"fmt"
	"net/netip"

	"github.com/google/nftables"
	"github.com/mdlayher/netlink"
	"golang.org/x/sys/unix"

	"github.com/podnet/podnet/dataplane/nftlayout"
	"github.com/podnet/podnet/policy"
)

// Renderer keeps one node's policy table current. It remembers what its
// last commit wrote, so that Apply sends only the difference; when it
// does not know (a new Renderer, a failed commit) it resyncs: it replaces
// the table whole, in one batch.
type Renderer struct {
	conn *nftables.Conn
	node string
	// denyLog, when set, is the deny log every pod chain writes to.
	denyLog *DenyLog
	// flowLog, when set, is the flow log and labels' (WithFlowLabels).
	flowLog *FlowLog
	// fold are the limits of folding (fold.go); zero: the defaults.
	fold foldLimits
	// cur is what the last successful commit programmed; nil when
	// unknown.
	cur *ruleset
	// memo is the last build's chains (chainmemo.go).
	memo chainMemo
}

// Option configures New.
type Option func(*options)

type options struct {
	netnsFd int
	denyLog *DenyLog
	flowLog *FlowLog
	fold    foldLimits
}

// WithNetNSFd makes the Renderer act in the network namespace of fd
// (an open /proc/<pid>/ns/net or /run/netns file) instead of the calling
// thread's. The caller keeps fd open while the Renderer is used.
func WithNetNSFd(fd int) Option { return func(o *options) { o.netnsFd = fd } }

// socketBuffer is the size of the netlink socket's buffers: a full
// resync of a large node is one batch, sent in one write, and each of
// its messages is acknowledged.
const socketBuffer = 16 << 20

// New opens an nftables connection for the policy of node's pods, in the
// calling thread's network namespace unless an option says otherwise. It
// does not touch the ruleset: the first Apply does.
func New(node string, opts ...Option) (*Renderer, error) {
	var o options
	for _, f := range opts {
		f(&o)
	}
	copts := []nftables.ConnOption{nftables.AsLasting(), nftables.WithSockOptions(bigBuffers)}
	if o.denyLog != nil {
		if err := o.denyLog.check(); err != nil {
			return nil, err
		}
	}
	if o.netnsFd != 0 {
		copts = append(copts, nftables.WithNetNSFd(o.netnsFd))
	}
	c, err := nftables.New(copts...)
	if err != nil {
		return nil, fmt.Errorf("open nftables netlink socket: %w", err)
	}
	return &Renderer{conn: c, node: node, denyLog: o.denyLog, flowLog: o.flowLog, fold: o.fold}, nil
}

// bigBuffers raises the socket's buffers past the system's maximum (as
// root may: SO_SNDBUFFORCE, SO_RCVBUFFORCE), falling back to what the
// maximum allows.
func bigBuffers(c *netlink.Conn) error {
	raw, err := c.SyscallConn()
	if err != nil {
		return err
	}
	var serr error
	err = raw.Control(func(fd uintptr) {
		for _, o := range [][2]int{{unix.SO_SNDBUFFORCE, unix.SO_SNDBUF}, {unix.SO_RCVBUFFORCE, unix.SO_RCVBUF}} {
			if unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, o[0], socketBuffer) != nil {
				serr = errors.Join(serr, unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, o[1], socketBuffer))
			}
		}
	})
	return errors.Join(err, serr)
}

// Close releases the connection; the ruleset stays.
func (r *Renderer) Close() error { return r.conn.CloseLasting() }

// Apply makes the table enforce ir for the Renderer's node: the change
// from the last Apply, in one atomic batch (a resync if there was none,
// or if the change fails: someone else changed the table). Counters of
// chains that do not change keep counting. Apply trusts its memory: an
// IR with no change sends nothing, so a table changed behind its back
// stays so until the next change or Resync; the agent's service should
// Resync now and then.
func (r *Renderer) Apply(ir *policy.IR) (Stats, error) {
	want := r.build(ir)
	if r.cur == nil {
		return r.resync(want)
	}
	p := diff(r.cur, want)
	if p.empty() {
		return Stats{}, nil
	}
	b := r.newBatch()
	err := b.queue(p)
	if err == nil {
		err = r.conn.Flush()
	}
	if err != nil {
		// What the kernel has is no longer known: start over.
		r.cur = nil
		st, rerr := r.resync(want)
		if rerr != nil {
			return Stats{}, fmt.Errorf("nftables: policy change failed (%v), and so did the resync: %w", err, rerr)
		}
		return st, nil
	}
	r.cur = want
	return p.stats(), nil
}

// Resync replaces the table with the ruleset of ir in one batch, whatever
// is there: stale chains, sets and elements go, counters start at zero.
func (r *Renderer) Resync(ir *policy.IR) (Stats, error) {
	return r.resync(r.build(ir))
}

func (r *Renderer) build(ir *policy.IR) *ruleset {
	next := chainMemo{}
	rs := buildWith(ir, r.node, buildOptions{denyLog: r.denyLog != nil, flow: r.flowLog != nil, fold: r.fold, memo: r.memo, nextMemo: next})
	r.memo = next
	return rs
}

func (r *Renderer) newBatch() *batch {
	b := newBatch(r.conn)
	b.denyLog, b.flowLog = r.denyLog, r.flowLog
	return b
}

func (r *Renderer) resync(want *ruleset) (Stats, error) {
	r.cur = nil
	b := r.newBatch()
	// A table a newer podnet wrote is not this one's to replace.
	if _, err := nftlayout.Check(r.conn, b.table, Layout); err != nil {
		return Stats{}, err
	}
	// Add first, so that the delete finds the table in any case.
	b.conn.AddTable(b.table)
	b.conn.DelTable(b.table)
	if err := b.queueBase(); err != nil {
		return Stats{}, err
	}
	if err := nftlayout.Declare(r.conn, b.table, Layout, 0); err != nil {
		return Stats{}, err
	}
	p := diff(emptyRuleset(), want)
	// The node sets come first: the base chains refer to them.
	for _, s := range p.newSets {
		if s.name == setNode4 || s.name == setNode6 {
			if err := b.addSet(s); err != nil {
				return Stats{}, err
			}
		}
	}
	b.queueBaseChains()
	p.newSets = slicesDeleteNodeSets(p.newSets)
	if err := b.queue(p); err != nil {
		return Stats{}, err
	}
	if err := r.conn.Flush(); err != nil {
		return Stats{}, fmt.Errorf("nftables: program policy table %s: %w", TableName, err)
	}
	r.cur = want
	st := p.stats()
	st.SetsAdded += 2
	return st, nil
}

func slicesDeleteNodeSets(ss []*set) []*set {
	out := ss[:0]
	for _, s := range ss {
		if s.name != setNode4 && s.name != setNode6 {
			out = append(out, s)
		}
	}
	return out
}

func emptyRuleset() *ruleset {
	return &ruleset{
		sets:   map[string]*set{},
		chains: map[string]*chain{},
		maps:   map[string]map[netip.Addr]string{mapIn4: {}, mapIn6: {}, mapOut4: {}, mapOut6: {}},
		folds:  map[string]*fold{},
	}
}

// Remove deletes the table and everything in it. A table that is not
// there is not an error; one of a newer podnet's layout is left, with a
// *nftlayout.NewerError.
func (r *Renderer) Remove() error {
	r.cur = nil
	t := table()
	if _, err := nftlayout.Check(r.conn, t, Layout); err != nil {
		return err
	}
	r.conn.AddTable(t)
	r.conn.DelTable(t)
	if err := r.conn.Flush(); err != nil && !errors.Is(err, unix.ENOENT) {
		return fmt.Errorf("nftables: remove policy table %s: %w", TableName, err)
	}
	return nil
}
