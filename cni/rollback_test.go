package cni

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/podnet/podnet/internal/testplugin/record"
	"github.com/podnet/podnet/internal/testutil"
)

// deadlineExec is a fakeExec that notes, for every DEL, how long its
// context had left and whether it was already done, and makes every ADD
// wait for its context when hang is set.
type deadlineExec struct {
	fakeExec
	hang bool

	mu   sync.Mutex
	dels []delContext
}

type delContext struct {
	left        time.Duration
	hasDeadline bool
	err         error
}

func (d *deadlineExec) ExecPlugin(ctx context.Context, path string, stdin []byte, env []string) ([]byte, error) {
	verb := ""
	for _, kv := range env {
		if v, ok := strings.CutPrefix(kv, "CNI_COMMAND="); ok {
			verb = v
		}
	}
	switch verb {
	case "ADD":
		if d.hang {
			<-ctx.Done()
			return nil, runtimeErrorf(CodeTimeout, "plugin %s did not finish: %v", path, ctx.Err())
		}
		return nil, Errorf(CodeTryAgainLater, "busy")
	case "DEL":
		dl, ok := ctx.Deadline()
		d.mu.Lock()
		d.dels = append(d.dels, delContext{left: time.Until(dl), hasDeadline: ok, err: ctx.Err()})
		d.mu.Unlock()
	}
	return d.fakeExec.ExecPlugin(ctx, path, stdin, env)
}

// The rollback of a failed ADD gets the caller's budget once more, on a
// context its cancellation does not reach; without a caller deadline, the
// default.
func TestRollbackBudget(t *testing.T) {
	const budget = 400 * time.Millisecond
	tests := []struct {
		name     string
		hang     bool // the ADD runs until the caller's deadline
		deadline bool
		cancel   bool // the caller cancels before the ADD
		min, max time.Duration
	}{
		{name: "ADD hangs past the deadline", hang: true, deadline: true, min: budget / 2, max: budget},
		{name: "ADD fails at once", deadline: true, min: budget / 2, max: budget},
		{name: "no caller deadline", min: DefaultRollbackTimeout - 5*time.Second, max: DefaultRollbackTimeout},
		{name: "caller cancelled", cancel: true, min: DefaultRollbackTimeout - 5*time.Second, max: DefaultRollbackTimeout},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			d := &deadlineExec{hang: tc.hang}
			r := NewRuntime([]string{"/fake"}, WithExec(d), WithCacheDir(t.TempDir()))
			ctx, cancel := context.Background(), context.CancelFunc(func() {})
			if tc.deadline {
				ctx, cancel = context.WithTimeout(ctx, budget)
			}
			defer cancel()
			if tc.cancel {
				var c context.CancelFunc
				ctx, c = context.WithCancel(ctx)
				c()
			}
			if _, err := r.AddNetworkList(ctx, chain(t, "1.1.0", "a", "b"), rtConf); err == nil {
				t.Fatal("ADD succeeded")
			}
			if len(d.dels) != 1 {
				t.Fatalf("%d DELs (%s), want the rollback's one", len(d.dels), d.sequence())
			}
			got := d.dels[0]
			if !got.hasDeadline || got.err != nil {
				t.Fatalf("rollback context: deadline %v, err %v; want a live context with a deadline", got.hasDeadline, got.err)
			}
			if got.left < tc.min || got.left > tc.max {
				t.Errorf("rollback had %v left, want between %v and %v", got.left, tc.min, tc.max)
			}
		})
	}
}

// An ADD whose plugin hangs, given a deadline, is rolled back by a DEL
// that hangs too: the call ends within twice the caller's budget (plus
// the kill grace of each exec), and neither plugin nor any process they
// started survives it, whether or not they obey SIGTERM. The plugins run
// in a namespace that models the node, as a runtime's would.
func TestAddRollbackOfHungPluginIsBounded(t *testing.T) {
	testutil.RequireRoot(t)
	binDir := t.TempDir()
	testutil.BuildBinary(t, "./internal/testplugin", binDir)
	_, host := testutil.NewNodeNetNS(t)
	_, pod := testutil.NewNetNS(t)
	var st syscall.Stat_t
	if err := syscall.Stat(host, &st); err != nil {
		t.Fatal(err)
	}
	hostID := "net:[" + strconv.FormatUint(st.Ino, 10) + "]"
	const (
		budget = time.Second
		grace  = 300 * time.Millisecond
		// Before the caller's deadline bounded it, the rollback alone
		// had 30 s: anything near that fails, a slow machine does not.
		limit = 2*budget + 2*grace + 3*time.Second
	)
	for _, ignoreTerm := range []bool{false, true} {
		t.Run(fmt.Sprintf("ignoreTerm=%v", ignoreTerm), func(t *testing.T) {
			rec := t.TempDir()
			list, err := ParseNetworkConfigList([]byte(fmt.Sprintf(`{"cniVersion":"1.1.0","name":"hang","plugins":[
				{"type":"testplugin","record":%q,"sleep":"5m","spawnChild":true,"childSleep":"5m","ignoreTerm":%v}]}`, rec, ignoreTerm)), "test")
			if err != nil {
				t.Fatal(err)
			}
			r := NewRuntime([]string{binDir}, WithCacheDir(t.TempDir()), WithExec(&RawExec{HostNetNS: host, KillGrace: grace}))
			ctx, cancel := context.WithTimeout(context.Background(), budget)
			defer cancel()
			start := time.Now()
			_, err = r.AddNetworkList(ctx, list, &RuntimeConf{ContainerID: "hung", NetNS: pod, IfName: "eth0"})
			took := time.Since(start)
			if !errors.Is(err, ErrTimeout) || !strings.Contains(err.Error(), "rollback after failed ADD") {
				t.Errorf("error %v; want the ADD's timeout and the rollback's", err)
			}
			if took > limit {
				t.Errorf("ADD with a %v deadline returned after %v (limit %v)", budget, took, limit)
			}
			recs, err := record.Read(rec)
			if err != nil {
				t.Fatal(err)
			}
			if got := strings.Join(record.Commands(recs), " "); got != "ADD DEL" {
				t.Errorf("calls %q, want ADD DEL", got)
			}
			for _, r := range recs {
				if r.NetNS != hostID {
					t.Errorf("%s ran in %s, want the node's %s", r.Command, r.NetNS, hostID)
				}
			}
			children, err := record.ChildPIDs(rec)
			if err != nil || len(children) != len(recs) {
				t.Errorf("child pids %v (%v), want one per call", children, err)
			}
			pids := children
			for _, r := range recs {
				pids = append(pids, r.PID)
			}
			for _, pid := range pids {
				testutil.WaitProcessGone(t, pid, 5*time.Second)
			}
		})
	}
}
