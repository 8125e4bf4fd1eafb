package netplugin

import (
	"log/slog"
	"path/filepath"
	"sync"
	"time"

	"github.com/fsnotify/fsnotify"
)

// confWatcher calls sync whenever the conf dir may have changed: on
// fsnotify events in the dir and in its parent (which is how the dir's own
// deletion and re-creation are seen), debounced, and every resync interval
// as a safety net for anything notifications miss (an unwatchable parent,
// a plugin file in a network's subdirectory, an overflowed queue).
type confWatcher struct {
	dir     string
	sync    func()
	log     *slog.Logger
	w       *fsnotify.Watcher
	done    chan struct{}
	stopped sync.WaitGroup
	once    sync.Once
}

// debounce coalesces the bursts of events one editor save or one atomic
// install makes.
const debounce = 20 * time.Millisecond

func startConfWatcher(dir string, resync time.Duration, sync func(), log *slog.Logger) (*confWatcher, error) {
	w, err := fsnotify.NewWatcher()
	if err != nil {
		return nil, err
	}
	cw := &confWatcher{dir: filepath.Clean(dir), sync: sync, log: log, w: w, done: make(chan struct{})}
	cw.addWatches()
	// Anything that changed between the probe and the watch being in
	// place is picked up here.
	sync()
	cw.stopped.Add(1)
	go cw.loop(resync)
	return cw, nil
}

// addWatches (re)adds the watches; both may fail while the directories do
// not exist, and are retried on every event and resync.
func (cw *confWatcher) addWatches() {
	_ = cw.w.Add(filepath.Dir(cw.dir))
	_ = cw.w.Add(cw.dir)
}

func (cw *confWatcher) loop(resync time.Duration) {
	defer cw.stopped.Done()
	ticker := time.NewTicker(resync)
	defer ticker.Stop()
	var pending <-chan time.Time
	for {
		select {
		case <-cw.done:
			return
		case ev, ok := <-cw.w.Events:
			if !ok {
				return
			}
			if ev.Name == cw.dir || filepath.Dir(ev.Name) == cw.dir || filepath.Dir(filepath.Dir(ev.Name)) == cw.dir {
				if pending == nil {
					pending = time.After(debounce)
				}
			}
		case err, ok := <-cw.w.Errors:
			if !ok {
				return
			}
			cw.log.Warn("watching network config dir", "dir", cw.dir, "err", err)
			pending = time.After(debounce)
		case <-pending:
			pending = nil
			cw.addWatches()
			cw.sync()
		case <-ticker.C:
			cw.addWatches()
			cw.sync()
		}
	}
}

func (cw *confWatcher) stop() {
	cw.once.Do(func() {
		close(cw.done)
		cw.stopped.Wait()
		_ = cw.w.Close()
	})
}
