package kubeevents

import "sync"

// Transition follows something that fails and recovers, such as the
// node's policy applies, so that a retry loop records an Event when the
// state changes and not at every attempt.
type Transition struct {
	mu      sync.Mutex
	failing bool
	last    string
}

// Fail reports whether a failure saying msg is news: the first of a run
// of failures, or one that says something else than the last recorded.
func (t *Transition) Fail(msg string) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	news := !t.failing || msg != t.last
	t.failing, t.last = true, msg
	return news
}

// Recover reports whether a success is news: the first after a failure.
func (t *Transition) Recover() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	news := t.failing
	t.failing, t.last = false, ""
	return news
}

// Once remembers keys (a pool's name and revision), so that a state seen
// again at every scan is recorded once.
type Once struct {
	mu   sync.Mutex
	seen map[string]bool
}

// First reports whether key is new, and remembers it.
func (o *Once) First(key string) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.seen[key] {
		return false
	}
	if o.seen == nil {
		o.seen = map[string]bool{}
	}
	o.seen[key] = true
	return true
}

// Keep forgets every key but keys (those still seen), so that the memory
// is as small as what is still wrong, and the same key wrong again later
// is recorded again.
func (o *Once) Keep(keys []string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	keep := make(map[string]bool, len(keys))
	for _, k := range keys {
		if o.seen[k] {
			keep[k] = true
		}
	}
	o.seen = keep
}
