package flowcap

import (
	"net/netip"
	"time"

	"github.com/podnet/podnet/flows"
)

// Burst folding of dropped packets: a dropped flow has no conntrack entry
// to end it, and a client retries (TCP's SYNs, a resolver's queries), so
// each dropped packet would otherwise be a record. The first packet of a
// 5-tuple gives its Start record at once (a follower sees the drop
// without delay); the packets of the same 5-tuple and verdict (and rule
// id) within FoldWindow of it are only counted, and when the window
// closes a burst of more than one packet gives an End record with the
// count. A window is fixed from the burst's first packet, not sliding, so
// a steady stream gives one Start and one End a window, never one record
// for ever.

// FoldWindow is how long a burst of dropped packets stays open.
const FoldWindow = time.Second

// DefaultFoldEntries bounds the open bursts; when it is reached the
// oldest closes early.
const DefaultFoldEntries = 4096

// foldKey identifies a burst.
type foldKey struct {
	verdict          flows.Verdict
	rule             uint64
	proto            uint8
	src, dst         netip.Addr
	srcPort, dstPort uint16
}

type burst struct {
	rec     flows.Record
	packets uint64
}

// folder is the open bursts, in the order they opened (which, with a
// fixed window, is the order they close). Not safe for concurrent use.
type folder struct {
	window time.Duration
	max    int
	open   map[foldKey]*burst
	order  []foldKey // a queue: order[head:] are open, oldest first
	head   int
}

func newFolder(window time.Duration, entries int) *folder {
	return &folder{window: window, max: max(entries, 1), open: map[foldKey]*burst{}}
}

// add counts a dropped packet: it returns the Start record to emit for
// a burst's first packet, and ok false for a packet folded into an open
// burst. Bursts that closed by now, or must close to make room, are
// returned in ended as End records.
func (f *folder) add(now time.Time, k foldKey, start flows.Record) (rec flows.Record, ok bool, ended []flows.Record) {
	ended = f.expire(now)
	if b, found := f.open[k]; found {
		b.packets++
		return flows.Record{}, false, ended
	}
	if len(f.open) >= f.max {
		ended = f.closeOldest(now, ended)
	}
	start.Packets = 1
	f.open[k] = &burst{rec: start, packets: 1}
	f.order = append(f.order, k)
	return start, true, ended
}

// expire closes the bursts whose window ended by now.
func (f *folder) expire(now time.Time) []flows.Record {
	var ended []flows.Record
	for f.head < len(f.order) {
		b := f.open[f.order[f.head]]
		if now.Sub(b.rec.Time) < f.window {
			break
		}
		ended = f.closeOldest(now, ended)
	}
	return ended
}

// closeOldest closes the oldest burst, appending its End to ended when
// packets were folded into it, at the window's end or now if sooner.
func (f *folder) closeOldest(now time.Time, ended []flows.Record) []flows.Record {
	k := f.order[f.head]
	f.order[f.head] = foldKey{}
	f.head++
	b := f.open[k]
	delete(f.open, k)
	if f.head > len(f.order)/2 && f.head > 64 {
		f.order = append(f.order[:0], f.order[f.head:]...)
		f.head = 0
	}
	if b.packets > 1 {
		end := b.rec
		end.Event = flows.End
		end.Packets = b.packets
		if end.Time = b.rec.Time.Add(f.window); end.Time.After(now) {
			end.Time = now
		}
		ended = append(ended, end)
	}
	return ended
}

func (f *folder) len() int { return len(f.open) }
