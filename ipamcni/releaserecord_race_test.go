package ipamcni

import (
	"context"
	"errors"
	"fmt"
	"testing"
)

// TestReleaseRecordRace interleaves an ADD of a handle with the agent
// finishing the handle's recorded release, deterministically: the ADD
// (clearReleaseRecord) stops between two of its steps, the agent's side
// (FinishRelease) runs, then the ADD goes on. The interleaving of issue 21
// item 2 is "during, pause 1, release failed":
//
//  1. the agent takes the record (FinishRelease calls release);
//  2. an ADD of the same handle looks for the record;
//  3. the release fails, and the agent gives the record back;
//  4. the ADD finishes its look, finds no claim, and reuses the handle's
//     addresses;
//  5. the agent's next pass releases the live pod's addresses.
//
// Whatever the order, an ADD that is told to go ahead (nil) must never
// see the handle released afterwards: neither by the pass under way nor
// by the next one. An ADD told to wait (ErrReleasing) retries later, as
// the runtime does on code 11.
func TestReleaseRecordRace(t *testing.T) {
	const handle = "net.c1"
	unreachable := errors.New("store unreachable")
	for _, during := range []bool{true, false} {
		for _, fail := range []bool{true, false} {
			for pause := 0; pause <= 3; pause++ {
				if !during && pause == 0 {
					continue // the ADD before the agent: TestReleaseRecordOrdering
				}
				name := fmt.Sprintf("during=%v/release_failed=%v/pause=%d", during, fail, pause)
				t.Run(name, func(t *testing.T) {
					dir := t.TempDir()
					ctx := context.Background()
					if err := WriteReleaseRecord(dir, ReleaseRecord{Node: "n1", Handle: handle}); err != nil {
						t.Fatal(err)
					}
					add := startAdd(dir, handle, pause)
					addGoAhead := false // the ADD returned nil: it holds the handle's addresses
					released := 0
					passCtx := ctx
					if !during {
						// The ADD may hold the release dir's lock: an
						// agent that finds it held waits for it; this one
						// gives up at once (the next pass covers it), so
						// that nothing here waits on a clock.
						c, cancel := context.WithCancel(ctx)
						cancel()
						passCtx = c
					}
					agent := func() {
						FinishRelease(passCtx, dir, handle, func(ReleaseRecord) error {
							if addGoAhead {
								t.Error("the agent released a handle an ADD had been told to reuse")
							}
							released++
							if during {
								if err, ended := add.run(); ended && err == nil {
									addGoAhead = true
									t.Error("an ADD went ahead while the agent was releasing the handle")
								}
							}
							if fail {
								return unreachable
							}
							return nil
						})
					}
					if !during {
						// The ADD starts first and stops at its pause (or
						// ends) before the agent's pass.
						if err, ended := add.run(); ended && err == nil {
							addGoAhead = true
						}
					}
					agent()
					err := add.finish()
					switch {
					case errors.Is(err, ErrReleasing):
						// The runtime retries the ADD (code 11).
						if err = ClearReleaseRecord(dir, handle); err != nil {
							t.Fatalf("the ADD's retry after the agent's pass: %v", err)
						}
					case err != nil:
						t.Fatalf("ADD: %v", err)
					}
					addGoAhead = true
					// The ADD reuses the handle; the agent's next pass.
					done, err := FinishRelease(ctx, dir, handle, func(ReleaseRecord) error {
						t.Error("the agent's next pass released the handle of a live pod: an ADD reused it")
						return nil
					})
					if done || err != nil {
						t.Errorf("the next pass: done %v, %v", done, err)
					}
					if recs, err := ReadReleaseRecords(dir); err != nil || len(recs) != 0 {
						t.Errorf("records left: %+v, %v", recs, err)
					}
				})
			}
		}
	}
}

// pausedAdd is an ADD's clearReleaseRecord on a goroutine of its own,
// stopped between its pause-th and next step (pause 0: never stopped).
type pausedAdd struct {
	dir, handle    string
	pause          int
	paused, resume chan struct{}
	done           chan error
	started, ended bool
	err            error
}

func startAdd(dir, handle string, pause int) *pausedAdd {
	return &pausedAdd{dir: dir, handle: handle, pause: pause,
		paused: make(chan struct{}), resume: make(chan struct{}), done: make(chan error, 1)}
}

// run starts the ADD and waits until it stops at its pause or ends; ended
// says it ended, with err.
func (a *pausedAdd) run() (err error, ended bool) {
	a.started = true
	steps := 0
	go func() {
		a.done <- clearReleaseRecord(a.dir, a.handle, func() {
			steps++
			if steps == a.pause {
				a.paused <- struct{}{}
				<-a.resume
			}
		})
	}()
	select {
	case <-a.paused:
		return nil, false
	case a.err = <-a.done:
		a.ended = true
		return a.err, true
	}
}

// finish runs the ADD to its end and returns its error.
func (a *pausedAdd) finish() error {
	if !a.started {
		if _, ended := a.run(); ended {
			return a.err
		}
	}
	if !a.ended {
		a.resume <- struct{}{}
		a.err = <-a.done
		a.ended = true
	}
	return a.err
}
