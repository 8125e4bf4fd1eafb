package agentsock

import (
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/podnet/podnet/ipam"
)

// DefaultListTTL is how long a cached List answer is served.
const DefaultListTTL = time.Second

// listCache keeps the List answers of a few prefixes (the pools'), for a
// TTL: unlike a Get, a List has no revision a later write could be
// checked against, so a change made behind the server's back is seen
// within the TTL, and one made through the server at once (it evicts).
// Answers to Lists that overlapped a write under their prefix are not
// kept, as in cache.
type listCache struct {
	mu       sync.Mutex
	ttl      time.Duration
	prefixes []string
	seq      uint64
	m        map[string]*listEntry
}

type listEntry struct {
	kvs   []ipam.KV
	at    time.Time
	valid bool
	mut   uint64
}

func newListCache(prefixes []string, ttl time.Duration) *listCache {
	if len(prefixes) == 0 {
		return nil
	}
	if ttl <= 0 {
		ttl = DefaultListTTL
	}
	return &listCache{ttl: ttl, prefixes: slices.Clone(prefixes), m: map[string]*listEntry{}}
}

// covers reports whether Lists of prefix are cached.
func (l *listCache) covers(prefix string) bool {
	return l != nil && slices.Contains(l.prefixes, prefix)
}

// get returns prefix's answer if it is younger than the TTL.
func (l *listCache) get(prefix string, now time.Time) ([]ipam.KV, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if e := l.m[prefix]; e != nil && e.valid && now.Sub(e.at) < l.ttl {
		return e.kvs, true
	}
	return nil, false
}

func (l *listCache) begin() uint64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.seq
}

// fill keeps a List answer read at token, as of at, unless a write under
// prefix came meanwhile.
func (l *listCache) fill(prefix string, kvs []ipam.KV, token uint64, at time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if e := l.m[prefix]; e != nil && e.mut > token {
		return
	}
	l.seq++
	l.m[prefix] = &listEntry{kvs: kvs, at: at, valid: true, mut: l.seq}
}

// wrote evicts the answers key's write may have changed.
func (l *listCache) wrote(key string) {
	if l == nil {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, p := range l.prefixes {
		if strings.HasPrefix(key, p) {
			l.seq++
			l.m[p] = &listEntry{mut: l.seq}
		}
	}
}
