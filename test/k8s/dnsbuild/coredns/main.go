// Command coredns is CoreDNS at the release ../go.mod pins, built with
// only the plugins the harness's Corefile (test/k8s/cluster/coredns.yaml)
// uses. It is CoreDNS's compile-time plugin selection, done in Go instead
// of by editing plugin.cfg: the plugin packages imported here are the
// only ones linked in, and the directives set here the only ones a
// Corefile may name (any other is an "Unknown directive" when CoreDNS
// reads it).
//
// None of these plugins sends a query anywhere: forward, grpc, etcd,
// route53, azure, clouddns, dnstap and the rest are not in the program,
// so no Corefile can make it resolve through an upstream.
// cluster/coredns_test.go holds this list to an allow-list and to the
// shipped Corefile. (The kubernetes plugin links in two more that
// register themselves, metadata and transfer; neither is a directive
// here, so a Corefile cannot name them.)
//
// Importing the plugins pulls in only what they need (the Kubernetes
// client for the kubernetes plugin, the Prometheus client), not the cloud
// SDKs and tracers of a full CoreDNS: on a fresh machine the first build
// downloads 79 modules instead of 197 (44 MB instead of 234 MB) and
// compiles a third less.
package main

import (
	"log"
	"slices"

	"github.com/coredns/coredns/core/dnsserver"
	"github.com/coredns/coredns/coremain"

	_ "github.com/coredns/coredns/plugin/cache"
	_ "github.com/coredns/coredns/plugin/errors"
	_ "github.com/coredns/coredns/plugin/health"
	_ "github.com/coredns/coredns/plugin/hosts"
	_ "github.com/coredns/coredns/plugin/kubernetes"
	_ "github.com/coredns/coredns/plugin/loadbalance"
	_ "github.com/coredns/coredns/plugin/log"
	_ "github.com/coredns/coredns/plugin/loop"
	_ "github.com/coredns/coredns/plugin/metrics" // the prometheus directive
	_ "github.com/coredns/coredns/plugin/ready"
	_ "github.com/coredns/coredns/plugin/reload"
	_ "github.com/coredns/coredns/plugin/template"
)

// plugins are the directives a Corefile may use, one per plugin package
// imported above.
// hosts and log are for the upstream DNS specs' own server pods
// (agnhost's /coredns), whose Corefile names them.
var plugins = []string{
	"errors", "health", "ready", "kubernetes", "prometheus", "cache", "loop", "reload", "loadbalance", "template", "hosts", "log",
}

func main() {
	// The order a query passes the plugins in is the release's
	// (dnsserver.Directives, generated from its plugin.cfg), not the
	// Corefile's: keep it, dropping every directive not in plugins.
	var directives []string
	for _, d := range dnsserver.Directives {
		if slices.Contains(plugins, d) {
			directives = append(directives, d)
		}
	}
	if len(directives) != len(plugins) {
		log.Fatalf("coredns: of the plugins %v, this release has only %v", plugins, directives)
	}
	if err := dnsserver.SetDirectives(directives); err != nil {
		log.Fatalf("coredns: %v", err)
	}
	coremain.Run()
}
