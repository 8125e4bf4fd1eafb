package flowapi

import (
	"bufio"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/podnet/podnet/flows"
)

// Headers of a /flows answer.
const (
	// SnapshotHeader is the number of records of the snapshot, which
	// come first: a follower that merges agents knows where the live
	// ones begin.
	SnapshotHeader = "Podnet-Flows-Snapshot"
	// NodeHeader is the agent's node.
	NodeHeader = "Podnet-Node"
)

const (
	// FollowBuffer is each follower's subscription buffer, in records:
	// what a follower that does not read costs the agent at most
	// (about 270 KiB), the records beyond dropped for it.
	FollowBuffer = 1024
	// MaxFollowers bounds the followers at once: more are refused (503).
	MaxFollowers = 32
	// batch is how many waiting records a follower is sent before a
	// flush.
	batch = 64
)

// Handler serves GET /flows from ring for the agent of node: NDJSON, one
// record a line, the newest limit records the query's filter selects,
// oldest first; with follow=true then every new record it selects,
// flushed as they come, until the client goes. A bad query is a 400
// whose text names the parameter; a namespace without flows is simply an
// empty answer.
func Handler(ring *flows.Ring, node string) http.Handler {
	return &handler{ring: ring, node: node, slots: make(chan struct{}, MaxFollowers), writeTimeout: 30 * time.Second}
}

type handler struct {
	ring  *flows.Ring
	node  string
	slots chan struct{}
	// writeTimeout ends a follow whose client has not taken a batch in
	// that long: a client that stops reading holds no goroutine forever.
	writeTimeout time.Duration
}

func (h *handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		http.Error(w, "flows: GET only", http.StatusMethodNotAllowed)
		return
	}
	q, err := ParseQuery(r.URL.Query(), h.ring.Capacity())
	if err != nil {
		http.Error(w, "flows: "+err.Error(), http.StatusBadRequest)
		return
	}
	var sub *flows.Subscription
	if q.Follow {
		select {
		case h.slots <- struct{}{}:
			defer func() { <-h.slots }()
		default:
			http.Error(w, fmt.Sprintf("flows: %d clients follow already; try later", MaxFollowers), http.StatusServiceUnavailable)
			return
		}
		// Subscribed before the snapshot, so that no record falls
		// between them; the ones in both are skipped below.
		sub = h.ring.Subscribe(q.Filter, FollowBuffer)
		defer sub.Close()
	}
	snap := h.ring.Snapshot(q.Filter, q.Limit)
	hd := w.Header()
	hd.Set("Content-Type", "application/x-ndjson")
	hd.Set("X-Content-Type-Options", "nosniff")
	hd.Set("Cache-Control", "no-store")
	hd.Set(NodeHeader, h.node)
	hd.Set(SnapshotHeader, strconv.Itoa(len(snap)))
	w.WriteHeader(http.StatusOK)
	if r.Method == http.MethodHead {
		return
	}
	out := newWriter(w, h.writeTimeout)
	defer out.done()
	for _, rec := range snap {
		if out.write(rec) != nil {
			return
		}
	}
	if out.flush() != nil || sub == nil {
		return
	}
	var seen uint64
	if len(snap) > 0 {
		seen = snap[len(snap)-1].Seq
	}
	follow(r, sub, out, seen)
}

// follow sends sub's records, those up to seen excepted, until the
// client goes or a write fails.
func follow(r *http.Request, sub *flows.Subscription, out *writer, seen uint64) {
	recs := sub.Records()
	for {
		select {
		case <-r.Context().Done():
			return
		case rec, ok := <-recs:
			if !ok {
				return
			}
			n := 0
			for {
				if rec.Seq > seen && out.write(rec) != nil {
					return
				}
				if n++; n == batch || len(recs) == 0 {
					break
				}
				rec = <-recs
			}
			if out.flush() != nil {
				return
			}
		}
	}
}

// writer writes records as NDJSON lines, buffered, each flush under a
// write deadline.
type writer struct {
	rc      *http.ResponseController
	bw      *bufio.Writer
	enc     *json.Encoder
	timeout time.Duration
}

func newWriter(w http.ResponseWriter, timeout time.Duration) *writer {
	bw := bufio.NewWriterSize(w, 32<<10)
	return &writer{rc: http.NewResponseController(w), bw: bw, enc: json.NewEncoder(bw), timeout: timeout}
}

// write encodes rec; a full buffer goes out on the way, so the deadline
// is set first (an http.ResponseWriter that cannot set deadlines, a
// test's recorder, is written without).
func (w *writer) write(rec flows.Record) error {
	_ = w.rc.SetWriteDeadline(time.Now().Add(w.timeout))
	return w.enc.Encode(rec)
}

func (w *writer) flush() error {
	_ = w.rc.SetWriteDeadline(time.Now().Add(w.timeout))
	if err := w.bw.Flush(); err != nil {
		return err
	}
	return w.rc.Flush()
}

// done clears the deadline: the connection may serve another request.
func (w *writer) done() { _ = w.rc.SetWriteDeadline(time.Time{}) }
