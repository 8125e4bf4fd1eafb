// Package bench measures pod network set-up and tear-down the way a
// kubelet experiences them: through a netplugin.PluginManager, pod after
// pod and then several at a time, with latency percentiles and
// throughput. It runs every plugin inside a "host" network namespace of
// its own, so a benchmark never changes the real host's network.
package bench
