package netplugin

import "sync"

// podLocks hands out one mutex per pod, created on demand and dropped when
// its last user unlocks, so the map does not grow with every pod ever seen.
// Different pods never wait on each other.
type podLocks struct {
	mu    sync.Mutex
	locks map[string]*podLock
}

type podLock struct {
	mu   sync.Mutex
	refs int // users holding or waiting for mu; guarded by podLocks.mu
}

// lock blocks until the pod's lock is held and returns its unlock.
func (l *podLocks) lock(key string) (unlock func()) {
	l.mu.Lock()
	if l.locks == nil {
		l.locks = map[string]*podLock{}
	}
	pl := l.locks[key]
	if pl == nil {
		pl = &podLock{}
		l.locks[key] = pl
	}
	pl.refs++
	l.mu.Unlock()

	pl.mu.Lock()
	return func() {
		pl.mu.Unlock()
		l.mu.Lock()
		pl.refs--
		if pl.refs == 0 {
			delete(l.locks, key)
		}
		l.mu.Unlock()
	}
}

// size is the number of pods with a lock in use; for tests.
func (l *podLocks) size() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.locks)
}

// users is the number of callers holding or waiting for the pod's lock;
// for tests.
func (l *podLocks) users(key string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	if pl := l.locks[key]; pl != nil {
		return pl.refs
	}
	return 0
}
