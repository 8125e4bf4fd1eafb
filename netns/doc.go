// Package netns is the one place in podnet that switches network
// namespaces, and the one place that creates and removes named ones.
//
// Network-namespace bugs are thread bugs: setns(2) changes the namespace
// of one OS thread, while Go moves goroutines between threads freely. So
// every switch goes through Do (or NetNS.Do), which runs a function on a
// fresh goroutine locked to its OS thread and switches that thread back
// afterwards. If the switch back fails, the thread is never returned to
// the runtime's pool: the goroutine exits still locked and the runtime
// terminates the thread. No other package may call setns(2) or
// unshare(CLONE_NEWNET) itself.
//
// The package must not configure anything inside a namespace (not even
// bringing up lo: that is the loopback plugin's job), and must not keep
// global state beyond what is needed to prepare /run/netns once.
package netns
