package kube

import (
	"strconv"
	"sync"
)

// A resourceVersion is an opaque string: the API server compares it for
// equality in its preconditions and promises nothing else. The allocator
// wants an int64 ModRevision it can hand back. revisions maps the one to
// the other, and back, without reading anything into the string:
//
//   - a resourceVersion in canonical decimal form below opaqueBase (every
//     etcd3-backed API server's: an etcd revision) is its own token. The
//     token means the same string in any process, and needs no memory.
//   - any other (leading zeros, letters, "0", too large) gets a token of
//     its own at or above opaqueBase, for its object, from a counter that
//     never repeats. Such a token means something only to the Store that
//     handed it out, and only while it remembers it: the two most recent
//     generations of genSize tokens, a token seen again moving up to the
//     newest. A write at a forgotten token, or at one handed out for
//     another object, is a conflict: the allocator reads the object
//     again and gets a token that is remembered.
//
// Either way a write sends back the very string the server gave, so the
// compare-and-swap is the API server's own, on the string.
type revisions struct {
	mu       sync.Mutex
	last     int64 // the last opaque token handed out, from opaqueBase
	cur, old revGen
}

// opaqueBase is the first token of a resourceVersion that is not its own
// token. Decimal ones below it are etcd revisions, which would take
// millennia to get there.
const opaqueBase int64 = 1 << 62

// genSize is how many opaque tokens a generation holds: as many as the
// agent's socket caches objects (agentsock.DefaultCacheEntries), so that
// its cached revisions are rarely forgotten.
const genSize = 4096

type revGen struct {
	token map[objectRV]int64
	rv    map[int64]objectRV
}

// objectRV is one object's resourceVersion.
type objectRV struct {
	object string // plural/name
	rv     string
}

func newGen() revGen {
	return revGen{token: map[objectRV]int64{}, rv: map[int64]objectRV{}}
}

// token returns the ModRevision of object at resourceVersion rv ("" is
// not one: the caller refuses it).
func (r *revisions) token(object, rv string) int64 {
	if n, err := strconv.ParseInt(rv, 10, 64); err == nil && n > 0 && n < opaqueBase && strconv.FormatInt(n, 10) == rv {
		return n
	}
	k := objectRV{object, rv}
	r.mu.Lock()
	defer r.mu.Unlock()
	if t, ok := r.cur.token[k]; ok {
		return t
	}
	t, ok := r.old.token[k]
	if !ok {
		if r.last == 0 {
			r.last = opaqueBase - 1
		}
		r.last++
		t = r.last
	}
	r.keep(k, t)
	return t
}

// resourceVersion returns the resourceVersion that token stands for on
// object, or false if it is not one this Store handed out for object, or
// one it has forgotten.
func (r *revisions) resourceVersion(object string, token int64) (string, bool) {
	if token > 0 && token < opaqueBase {
		return strconv.FormatInt(token, 10), true
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	k, ok := r.cur.rv[token]
	if !ok {
		if k, ok = r.old.rv[token]; ok {
			r.keep(k, token)
		}
	}
	if !ok || k.object != object {
		return "", false
	}
	return k.rv, true
}

// keep puts k's token in the newest generation, starting a new one when
// it is full; r.mu is held.
func (r *revisions) keep(k objectRV, t int64) {
	if r.cur.token == nil || len(r.cur.token) >= genSize {
		r.old, r.cur = r.cur, newGen()
	}
	r.cur.token[k] = t
	r.cur.rv[t] = k
}
