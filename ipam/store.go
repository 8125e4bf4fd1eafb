package ipam

import (
	"context"
	"errors"
)

// Store is the key-value store under the allocator: bbolt on one machine,
// etcd in a cluster (see ipam/store). Implementations must be safe for
// concurrent use and must pass ipam/store/storetest.
//
// Every write is one conditional put or delete of a single key: the only
// kind of write every store can make, the Kubernetes API included (one
// object, compare-and-swap on its resourceVersion). ModRevision is an
// equality token: 0 means absent, and no order between revisions is
// assumed.
type Store interface {
	// Get returns the key, or an error matching ErrNotFound. A store may
	// serve it from a cache that lags the latest write, unless ctx
	// carries FreshRead.
	Get(ctx context.Context, key string) (KV, error)
	// List returns every key starting with prefix, in key order.
	List(ctx context.Context, prefix string) ([]KV, error)
	// Write applies w if w.Key's ModRevision equals w.ModRevision (see
	// Write) and returns the key's new ModRevision, 0 after a delete. A
	// failed compare returns an error matching ErrConflict and changes
	// nothing; deleting a missing key unconditionally is not an error.
	Write(ctx context.Context, w Write) (int64, error)
	// Close releases the store's resources.
	Close() error
}

// Watcher is what a node agent routing from the store needs besides
// Store (bbolt and etcd have it): a list at a store revision, and a watch
// from a revision. The allocator does not watch.
type Watcher interface {
	// ListRev is List, with the store revision the read saw.
	ListRev(ctx context.Context, prefix string) ([]KV, int64, error)
	// Watch streams changes to keys under prefix from revision fromRev
	// (0: from now, which includes nothing this store has already seen
	// written, even when served by a replica that lags) until ctx ends.
	// The channel closes after ctx ends or after a response carrying Err.
	Watch(ctx context.Context, prefix string, fromRev int64) (<-chan WatchResponse, error)
}

// KV is one key with its value and the revision of its last write.
type KV struct {
	Key         string
	Value       []byte
	ModRevision int64
}

// EventType says whether a watched key was written or deleted.
type EventType int

// Event types.
const (
	EventPut EventType = iota
	EventDelete
)

// Event is one change seen by a watch. For a delete, KV.Value is empty and
// KV.ModRevision is the revision of the deletion.
type Event struct {
	Type EventType
	KV   KV
}

// WatchResponse carries the events of one or more revisions, in revision
// order, or the error that ended the watch.
type WatchResponse struct {
	Events []Event
	Err    error
}

// Errors every Store returns, matched with errors.Is.
var (
	ErrNotFound = errors.New("key not found")
	ErrConflict = errors.New("revision conflict")
	// ErrUnavailable means the store could not be reached or locked in
	// time; the allocator retries it, then reports KindUnavailable.
	ErrUnavailable = errors.New("store unavailable")
	// ErrCompacted means a watch asked for revisions the store no longer
	// keeps; the watcher must List again and watch from there.
	ErrCompacted = errors.New("revision compacted")
	// ErrWrite means the store could not write what it had accepted (a
	// commit failing on a full disk); the allocator reports it as
	// KindWriteFailed.
	ErrWrite = errors.New("store write failed")
	// ErrDenied means the store refused the caller: credentials it does
	// not accept, or rights they lack (an API server's 401 or 403). No
	// retry helps until the configuration is fixed, so the allocator does
	// not retry it and reports it as KindInvalid.
	ErrDenied = errors.New("store access denied")
)

// AnyRevision as Write.ModRevision makes a write unconditional.
const AnyRevision int64 = -1

// Write is one conditional put or delete of a single key.
type Write struct {
	Key string
	// ModRevision the key must have for the write to apply: 0 means the
	// key must not exist, AnyRevision means no condition.
	ModRevision int64
	Value       []byte
	Delete      bool
}

type freshReadKey struct{}

// FreshRead marks ctx so that a store which serves reads from a cache
// reads through to its source instead: for decisions that write nothing
// (a repeated ADD returning held addresses, Check's re-reads).
func FreshRead(ctx context.Context) context.Context {
	return context.WithValue(ctx, freshReadKey{}, true)
}

// IsFreshRead reports whether ctx was marked by FreshRead.
func IsFreshRead(ctx context.Context) bool {
	v, _ := ctx.Value(freshReadKey{}).(bool)
	return v
}
