package admitsock

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"time"

	"github.com/podnet/podnet/internal/wire"
)

// DefaultSocket is where the agent serves the handshake.
const DefaultSocket = "/run/podnet/policy.sock"

// ClosedLockPath is the lock file, beside the socket, that the plugin
// holds while it closes a pod and the agent while it opens one (see
// dataplane.Closed): both derive it from the socket's path.
func ClosedLockPath(socket string) string {
	return filepath.Join(filepath.Dir(socket), "policy-closed.lock")
}

// What went wrong, for errors.Is. Each error also names the socket and
// the pod.
var (
	// ErrUnreachable: nothing listens on the socket (no agent, or one
	// restarting).
	ErrUnreachable = errors.New("policy agent unreachable")
	// ErrNoAnswer: the agent took the request and did not answer in
	// time, or the connection broke.
	ErrNoAnswer = errors.New("no answer from the policy agent")
	// ErrRefused: the agent answered that it could not admit the pod
	// (the message says why), or speaks another protocol version.
	ErrRefused = errors.New("policy agent refused")
)

// Ask tells the agent at socket about p and returns its answer: whether
// a NetworkPolicy selects the pod (its rules are then in place). It
// waits until ctx ends at the latest, and the agent no longer than that.
func Ask(ctx context.Context, socket string, p Pod) (selected bool, err error) {
	fail := func(kind error, what string, cause error) (bool, error) {
		if cause == nil {
			return false, fmt.Errorf("policy agent %s: admit %s: %s: %w", socket, p, what, kind)
		}
		return false, fmt.Errorf("policy agent %s: admit %s: %s%w: %w", socket, p, what, cause, kind)
	}
	r := request{version: version, pod: p}
	dl, hasDeadline := ctx.Deadline()
	if hasDeadline {
		r.deadline = dl.UnixNano()
	}
	frame, err := encodeRequest(r)
	if err != nil {
		return fail(ErrRefused, "", err)
	}
	var d net.Dialer
	c, err := d.DialContext(ctx, "unix", socket)
	if err != nil {
		if ctx.Err() != nil {
			return fail(ErrNoAnswer, "connect: ", ctx.Err())
		}
		return fail(ErrUnreachable, "", err)
	}
	defer c.Close()
	if hasDeadline {
		_ = c.SetDeadline(dl)
	}
	stop := context.AfterFunc(ctx, func() { _ = c.SetDeadline(time.Unix(1, 0)) })
	defer stop()
	if _, err := c.Write(frame); err != nil {
		return fail(ErrNoAnswer, "send: ", cause(ctx, err))
	}
	answer, err := wire.ReadFrame(c, nil, maxAnswer)
	if err != nil {
		return fail(ErrNoAnswer, "", cause(ctx, err))
	}
	st, msg, err := decodeAnswer(answer)
	if err != nil {
		return fail(ErrNoAnswer, "undecodable answer: ", err)
	}
	switch st {
	case statusNotSelected:
		return false, nil
	case statusSelected:
		return true, nil
	case statusFailed, statusUnsupported:
		return fail(ErrRefused, msg, nil)
	}
	return fail(ErrRefused, fmt.Sprintf("answer of unknown status %d (an agent of another podnet version)", st), nil)
}

// cause prefers the context's error to the timeout it caused.
func cause(ctx context.Context, err error) error {
	if ctxErr := ctx.Err(); ctxErr != nil {
		return ctxErr
	}
	if errors.Is(err, os.ErrDeadlineExceeded) {
		return context.DeadlineExceeded
	}
	return err
}
