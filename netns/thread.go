package netns

import (
	"errors"
	"fmt"
	"os"
	"runtime"
	"runtime/debug"

	"golang.org/x/sys/unix"
)

// setns is a variable only so that tests can make the switch back fail;
// nothing else may replace it.
var setns = unix.Setns

// PanicError is what Do re-panics with when fn panicked: the panic
// crosses from the locked goroutine to the caller's, and the stack of
// the original panic would be lost without it.
type PanicError struct {
	Value any
	Stack []byte
}

func (p *PanicError) Error() string {
	return fmt.Sprintf("panic in network namespace: %v", p.Value)
}

// onFreshThread runs body on a new goroutine locked to its OS thread.
// body may move the thread to another network namespace; afterwards the
// thread is moved back to the namespace it started in. If that fails, the
// goroutine exits still locked, and the Go runtime terminates the thread
// instead of handing it, in the wrong namespace, to other goroutines.
//
// A fresh goroutine rather than the caller's: the caller may already be
// locked (and must stay where it is), and a thread we may have to kill
// must not be the caller's.
func onFreshThread(body func() error) error {
	done := make(chan outcome, 1)
	go func() {
		runtime.LockOSThread()
		var o outcome
		defer func() { done <- o }()

		orig, err := os.OpenFile(threadSelfNS, os.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			runtime.UnlockOSThread()
			o.err = fmt.Errorf("netns: open the current thread's namespace: %w", err)
			return
		}
		defer orig.Close()

		o = runCatching(body)

		// Switch back even when body failed or did not switch: it may
		// have failed half way, and the check costs one system call.
		if err := setns(int(orig.Fd()), unix.CLONE_NEWNET); err != nil {
			// Deliberately no UnlockOSThread: see above.
			o.err = errors.Join(fmt.Errorf("netns: cannot return to the original namespace, thread discarded: %w", err), o.err)
			return
		}
		runtime.UnlockOSThread()
	}()
	o := <-done
	if o.panic != nil {
		panic(o.panic)
	}
	return o.err
}

// outcome is how body ended: its error, or its panic.
type outcome struct {
	err   error
	panic *PanicError
}

// runCatching runs body, turning a panic into the outcome's PanicError
// with the stack where it happened; a nested Do's PanicError is kept as
// it is, so the stack stays the original one.
func runCatching(body func() error) (o outcome) {
	defer func() {
		p := recover()
		if p == nil {
			return
		}
		if pe, ok := p.(*PanicError); ok {
			o.panic = pe
			return
		}
		o.panic = &PanicError{Value: p, Stack: debug.Stack()}
	}()
	o.err = body()
	return o
}
