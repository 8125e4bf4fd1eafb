package ipamtest

import (
	"context"
	"fmt"
	"net/netip"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/podnet/podnet/ipam"
)

// Cluster is what the quorum fault test needs of a three-member test
// cluster (etcdtest.Cluster has it).
type Cluster interface {
	Stop(i int)
	Restart(i int)
	Running(i int) bool
	// Leader is the index of the leading member, -1 while none leads.
	Leader() int
}

// RunQuorumFaults drives concurrent allocations through a store whose
// three-member cluster loses members:
//
//   - the leader stops while allocations run: every allocation still
//     succeeds (the allocator retries the unreachable store, the client
//     moves to another member, the others elect a leader);
//   - a second member stops: allocations fail with KindUnavailable within
//     the caller's deadline, and nothing panics;
//   - both come back: the failed allocations, retried, succeed; no address
//     has two owners and Check is clean.
//
// newStore must return a store configured with every member's endpoint.
func RunQuorumFaults(t *testing.T, c Cluster, newStore func(t *testing.T) ipam.Store) {
	runQuorumFaults(t, c, newStore, faultLimits{phase1: time.Minute, alloc: 20 * time.Second})
}

// faultLimits bound the waits of RunQuorumFaults, so that a store that
// never answers fails the test within them instead of running into the
// go test timeout.
type faultLimits struct {
	// phase1 bounds the first phase as a whole: the allocations that
	// must be done before the leader is stopped, and all the others.
	// It takes a few seconds when the store works.
	phase1 time.Duration
	// alloc bounds one allocation: enough for the allocator to retry
	// while the remaining members elect a leader.
	alloc time.Duration
}

func runQuorumFaults(t *testing.T, c Cluster, newStore func(t *testing.T) ipam.Store, lim faultLimits) {
	st := newStore(t)
	keys := ipam.Keys{Prefix: "/faults/" + t.Name() + "/"}
	q := &quorumFaults{t: t, c: c, lim: lim, addrs: map[string]netip.Prefix{}, nodes: map[string]string{},
		a: ipam.New(st, ipam.Config{Keys: keys, UnavailableTimeout: 20 * time.Second})}
	mustPool(t, q.a, "p", "10.30.0.0/16", 0)
	q.leaderStops()
	failed := q.noQuorum()
	q.recover(failed)
	q.verify(4*2*12 + len(failed) + 8)
}

// quorumFaults is one run of RunQuorumFaults.
type quorumFaults struct {
	t   *testing.T
	c   Cluster
	a   *ipam.Allocator
	lim faultLimits

	mu    sync.Mutex
	addrs map[string]netip.Prefix // handle -> address
	nodes map[string]string       // handle -> node
}

func (q *quorumFaults) assign(ctx context.Context, node, handle string) error {
	got, err := q.a.AutoAssign(ctx, ipam.AutoAssignArgs{Handle: handle, Node: node, Num4: 1})
	if err != nil {
		return err
	}
	q.mu.Lock()
	q.addrs[handle] = got.IPv4[0]
	q.nodes[handle] = node
	q.mu.Unlock()
	return nil
}

// leaderStops is phase 1: the leader stops midway through 4 nodes x 2
// workers x 12 allocations, all of which must succeed.
func (q *quorumFaults) leaderStops() {
	t := q.t
	leader := waitLeader(t, q.c)
	const total, stopAt = 4 * 2 * 12, 24
	phaseEnd := time.Now().Add(q.lim.phase1)
	phaseCtx, cancelPhase := context.WithDeadline(context.Background(), phaseEnd)
	defer cancelPhase()
	var done atomic.Int64
	reached := make(chan struct{}) // closed by the allocation that makes stopAt
	workersDone := q.startWorkers(phaseCtx, func() {
		if done.Add(1) == stopAt {
			close(reached)
		}
	})
	// Every allocation's context ends with phaseCtx, so the workers are
	// done soon after it; grace only covers their last return.
	const grace = 10 * time.Second
	waitWorkers := func() {
		select {
		case <-workersDone:
		case <-time.After(time.Until(phaseEnd) + grace):
			t.Fatalf("phase 1: allocations still running %v after the phase deadline (%v): the store does not end them with their context", grace, q.lim.phase1)
		}
	}
	select {
	case <-reached:
		q.c.Stop(leader)
		waitWorkers()
	case <-workersDone:
		t.Fatalf("phase 1: the allocations ended with %d of %d done, short of the %d after which the leader was to be stopped: the leader was never stopped",
			done.Load(), total, stopAt)
	case <-phaseCtx.Done():
		t.Errorf("phase 1: %d of %d allocations done after %v, short of the %d after which the leader was to be stopped: the leader was never stopped",
			done.Load(), total, q.lim.phase1, stopAt)
		waitWorkers()
		t.FailNow()
	}
	if t.Failed() {
		t.FailNow()
	}
}

// startWorkers runs phase 1's allocations, 4 nodes x 2 workers x 12,
// calling allocated after each; the channel closes when all have ended.
func (q *quorumFaults) startWorkers(phaseCtx context.Context, allocated func()) <-chan struct{} {
	var wg sync.WaitGroup
	for n := range 4 {
		for w := range 2 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				q.worker(phaseCtx, n, w, allocated)
			}()
		}
	}
	workersDone := make(chan struct{})
	go func() {
		wg.Wait()
		close(workersDone)
	}()
	return workersDone
}

// worker makes node n's worker w's 12 allocations of phase 1.
func (q *quorumFaults) worker(phaseCtx context.Context, n, w int, allocated func()) {
	for i := range 12 {
		ctx, cancel := context.WithTimeout(phaseCtx, q.lim.alloc)
		err := q.assign(ctx, fmt.Sprint("n", n), fmt.Sprintf("one-%d-%d-%d", n, w, i))
		cancel()
		if err != nil {
			q.t.Errorf("allocation with one member down: %v", err)
			return
		}
		allocated()
	}
}

// noQuorum is phase 2: a second member stops, and allocations fail with
// KindUnavailable within their deadline. It returns their handles.
func (q *quorumFaults) noQuorum() []string {
	for i := range 3 {
		if q.c.Running(i) {
			q.c.Stop(i)
			break
		}
	}
	var failed []string
	var mu sync.Mutex
	var wg sync.WaitGroup
	for n := range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			handle := fmt.Sprint("noquorum-", n)
			q.failWithoutQuorum(fmt.Sprint("n", n), handle)
			mu.Lock()
			failed = append(failed, handle)
			mu.Unlock()
		}()
	}
	wg.Wait()
	return failed
}

func (q *quorumFaults) failWithoutQuorum(node, handle string) {
	const deadline = 3 * time.Second
	ctx, cancel := context.WithTimeout(context.Background(), deadline)
	defer cancel()
	start := time.Now()
	err := q.assign(ctx, node, handle)
	took := time.Since(start)
	switch {
	case err == nil:
		q.t.Errorf("allocation without quorum succeeded")
	case ipam.KindOf(err) != ipam.KindUnavailable:
		q.t.Errorf("allocation without quorum: %s, want %s: %v", ipam.KindOf(err), ipam.KindUnavailable, err)
	case took > deadline+2*time.Second:
		q.t.Errorf("allocation without quorum returned after %v, deadline %v", took, deadline)
	}
}

// recover is phase 3: both members return; the failed ADDs are retried,
// as a runtime does, and 8 more allocations succeed.
func (q *quorumFaults) recover(failed []string) {
	t := q.t
	for i := range 3 {
		if !q.c.Running(i) {
			q.c.Restart(i)
		}
	}
	for i, h := range failed {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		err := q.assign(ctx, fmt.Sprint("n", i), h)
		cancel()
		if err != nil {
			t.Fatalf("allocation after the members returned: %v", err)
		}
	}
	for i := range 8 {
		if err := q.assign(ctxT(t), "n9", fmt.Sprint("after-", i)); err != nil {
			t.Fatal(err)
		}
	}
}

// verify checks that every handle holds the one address it was given,
// that no address has two owners, and that Check is clean.
func (q *quorumFaults) verify(want int) {
	t := q.t
	owner := map[netip.Addr]string{}
	for h, p := range q.addrs {
		if o, dup := owner[p.Addr()]; dup {
			t.Errorf("address %s given to %s and %s", p.Addr(), o, h)
		}
		owner[p.Addr()] = h
		held, err := q.a.IPsByHandle(ctxT(t), q.nodes[h], h)
		if err != nil || len(held) != 1 || held[0] != p {
			t.Errorf("handle %s holds %v (%v), was given %s", h, held, err, p)
		}
	}
	if len(q.addrs) != want {
		t.Errorf("%d handles hold addresses, want %d", len(q.addrs), want)
	}
	mustClean(t, q.a)
}

func waitLeader(t *testing.T, c Cluster) int {
	t.Helper()
	for end := time.Now().Add(10 * time.Second); time.Now().Before(end); time.Sleep(20 * time.Millisecond) {
		if l := c.Leader(); l >= 0 {
			return l
		}
	}
	t.Fatal("no etcd leader after 10s")
	return -1
}
