package flock

import (
	"context"
	"errors"
	"path/filepath"
	"sync"
	"testing"
	"time"
)

// acquires are the two ways to take the lock.
var acquires = map[string]func(context.Context, string, time.Duration) (*Lock, error){
	"Acquire": Acquire, "AcquireLong": AcquireLong,
}

// TestContended: many waiters on one lock each get it once, one at a
// time.
func TestContended(t *testing.T) {
	for name, acquire := range acquires {
		t.Run(name, func(t *testing.T) { testContended(t, acquire) })
	}
}

func testContended(t *testing.T, acquire func(context.Context, string, time.Duration) (*Lock, error)) {
	path := filepath.Join(t.TempDir(), "dir", "lock")
	var mu sync.Mutex
	holders, max := 0, 0
	var wg sync.WaitGroup
	for range 50 {
		wg.Go(func() {
			l, err := acquire(t.Context(), path, 20*time.Second)
			if err != nil {
				t.Error(err)
				return
			}
			mu.Lock()
			holders++
			max = maxInt(max, holders)
			mu.Unlock()
			time.Sleep(time.Millisecond)
			mu.Lock()
			holders--
			mu.Unlock()
			l.Release()
		})
	}
	wg.Wait()
	if max != 1 {
		t.Fatalf("%d holders at once, want 1", max)
	}
}

func maxInt(a, b int) int {
	if a > b {
		return a
	}
	return b
}

// TestTimeoutAndCancel: a wait ends with ErrBusy at its timeout or when
// ctx ends, and a wait given up on does not keep the lock once the
// holder lets go.
func TestTimeoutAndCancel(t *testing.T) {
	for name, acquire := range acquires {
		t.Run(name, func(t *testing.T) { testTimeoutAndCancel(t, acquire) })
	}
}

func testTimeoutAndCancel(t *testing.T, acquire func(context.Context, string, time.Duration) (*Lock, error)) {
	path := filepath.Join(t.TempDir(), "lock")
	held, err := Acquire(t.Context(), path, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if _, err := acquire(t.Context(), path, 100*time.Millisecond); !errors.Is(err, ErrBusy) {
		t.Fatalf("Acquire of a held lock: %v, want ErrBusy", err)
	}
	if d := time.Since(start); d < 100*time.Millisecond || d > 2*time.Second {
		t.Fatalf("timed out after %s, want 100ms", d)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 50*time.Millisecond)
	defer cancel()
	if _, err := acquire(ctx, path, time.Minute); !errors.Is(err, ErrBusy) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Acquire with a context that ends: %v, want ErrBusy (deadline exceeded)", err)
	}
	held.Release()
	// The abandoned waits take the lock and let it go at once.
	l, err := Acquire(t.Context(), path, 5*time.Second)
	if err != nil {
		t.Fatalf("Acquire after the holder let go: %v", err)
	}
	l.Release()
}

// TestTryAcquire: a held lock is ErrBusy at once; a released one is taken.
func TestTryAcquire(t *testing.T) {
	path := filepath.Join(t.TempDir(), "lock")
	held, err := TryAcquire(path)
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if l, err := TryAcquire(path); !errors.Is(err, ErrBusy) {
		if l != nil {
			l.Release()
		}
		t.Fatalf("TryAcquire of a held lock: %v, want ErrBusy", err)
	}
	if d := time.Since(start); d > time.Second {
		t.Errorf("TryAcquire of a held lock took %v", d)
	}
	held.Release()
	l, err := TryAcquire(path)
	if err != nil {
		t.Fatalf("TryAcquire after the release: %v", err)
	}
	l.Release()
}
