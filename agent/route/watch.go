package route

import (
	"log/slog"
	"net"
	"net/netip"
	"sync/atomic"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/podnet/podnet/netns"
)

// routeWatch tells the route service when one of its routes (protocol
// RouteProtocol) is deleted by someone else: by hand, by another tool
// flushing the table. Without it a route deleted under the agent stays
// gone until the next resync (a minute by default); with it the next
// reconcile puts it back at once. The agent's own deletions wake it
// too, for one reconcile that finds nothing to do. A route another tool
// puts over one of the agent's destinations wakes it (the reconcile
// counts a conflict and leaves it alone), and while a conflict lasts
// any route's deletion does: that may be the one in the way.
type routeWatch struct {
	gone      chan struct{} // one pending wake-up at most
	done      chan struct{}
	conflicts atomic.Bool
	// desired are the destinations of the last reconcile.
	desired atomic.Pointer[map[netip.Prefix]Route]
}

// watchRoutes subscribes to route changes in the namespace ns (the
// process's own when empty); a subscription that cannot be made is
// logged and leaves the resync to repair what is deleted.
func watchRoutes(ns string, log *slog.Logger) *routeWatch {
	w := &routeWatch{gone: make(chan struct{}, 1), done: make(chan struct{})}
	updates := make(chan netlink.RouteUpdate, 64)
	subscribe := func() error {
		return netlink.RouteSubscribeWithOptions(updates, w.done, netlink.RouteSubscribeOptions{
			ErrorCallback: func(err error) { log.Warn("route watch", "err", err) },
		})
	}
	var err error
	if ns != "" {
		// The socket keeps the namespace of the thread that made it.
		err = netns.Do(ns, subscribe)
	} else {
		err = subscribe()
	}
	if err != nil {
		log.Warn("route watch unavailable: a route deleted by hand comes back at the next resync", "err", err)
		return w
	}
	go func() {
		for u := range updates {
			if w.wakes(u) {
				select {
				case w.gone <- struct{}{}:
				default:
				}
			}
		}
	}()
	return w
}

// Gone is signalled after routes of the agent were deleted (never
// without a watch).
func (w *routeWatch) Gone() <-chan struct{} {
	if w == nil {
		return nil
	}
	return w.gone
}

// wakes says whether u may have undone a route of the agent's.
func (w *routeWatch) wakes(u netlink.RouteUpdate) bool {
	switch {
	case u.Type == unix.RTM_DELROUTE:
		return u.Protocol == RouteProtocol || w.conflicts.Load()
	case u.Type == unix.RTM_NEWROUTE && u.Protocol != RouteProtocol:
		p, ok := prefixOf(u.Dst)
		d := w.desired.Load()
		if !ok || d == nil {
			return false
		}
		_, mine := (*d)[p]
		return mine
	}
	return false
}

func prefixOf(n *net.IPNet) (netip.Prefix, bool) {
	if n == nil {
		return netip.Prefix{}, false
	}
	a, ok := netip.AddrFromSlice(n.IP)
	ones, _ := n.Mask.Size()
	return netip.PrefixFrom(a.Unmap(), ones), ok
}

// Reconciled tells the watch the last reconcile's destinations and
// whether it left any of them to a route it does not own.
func (w *routeWatch) Reconciled(desired map[netip.Prefix]Route, conflicts bool) {
	if w != nil {
		w.desired.Store(&desired)
		w.conflicts.Store(conflicts)
	}
}

// Close ends the subscription.
func (w *routeWatch) Close() {
	select {
	case <-w.done:
	default:
		close(w.done)
	}
}
