package cluster

import (
	"errors"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"net/netip"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"unicode"
)

// corefileBlock is a block of a Corefile: a server block (keys are its
// zones, each a zone[:port]) or a plugin's options (keys empty).
type corefileBlock struct {
	keys  []string
	lines []corefileLine
}

// corefileLine is a directive of a server block, or an option of a
// plugin's block: its words, and the block it opens, if any.
type corefileLine struct {
	words []string
	block *corefileBlock
}

// parseCorefile reads a Corefile as CoreDNS's Caddyfile reader does, as
// far as this test needs: server blocks of lines of words, any of them
// opening a nested block; # comments; quoted words. A word that the
// reader would expand ({$ENV}, import) is refused, since it could bring
// in what this test never sees.
func parseCorefile(text string) ([]corefileBlock, error) {
	var lines [][]string
	for _, raw := range strings.Split(text, "\n") {
		words, err := corefileWords(raw)
		if err != nil {
			return nil, err
		}
		if len(words) > 0 {
			lines = append(lines, words)
		}
	}
	var servers []corefileBlock
	for len(lines) > 0 {
		keys := lines[0]
		if keys[len(keys)-1] != "{" || len(keys) < 2 {
			return nil, fmt.Errorf("server block %q: want its zones then {", strings.Join(keys, " "))
		}
		b := corefileBlock{keys: keys[:len(keys)-1]}
		rest, err := b.parseBody(lines[1:])
		if err != nil {
			return nil, fmt.Errorf("server block %s: %w", strings.Join(b.keys, " "), err)
		}
		servers, lines = append(servers, b), rest
	}
	return servers, nil
}

// parseBody reads lines up to the } that closes b and returns the rest.
func (b *corefileBlock) parseBody(lines [][]string) ([][]string, error) {
	for len(lines) > 0 {
		words := lines[0]
		lines = lines[1:]
		if len(words) == 1 && words[0] == "}" {
			return lines, nil
		}
		for _, w := range words[:len(words)-1] {
			if w == "{" || w == "}" {
				return nil, fmt.Errorf("%q: a brace inside a line", strings.Join(words, " "))
			}
		}
		line := corefileLine{words: words}
		if words[len(words)-1] == "{" {
			line.words = words[:len(words)-1]
			line.block = &corefileBlock{}
			var err error
			if lines, err = line.block.parseBody(lines); err != nil {
				return nil, fmt.Errorf("%s: %w", line.words[0], err)
			}
		} else if words[len(words)-1] == "}" {
			return nil, fmt.Errorf("%q: a brace inside a line", strings.Join(words, " "))
		}
		if len(line.words) == 0 {
			return nil, fmt.Errorf("a block without a directive")
		}
		b.lines = append(b.lines, line)
	}
	return nil, fmt.Errorf("no closing }")
}

// corefileWords splits one line into words.
func corefileWords(line string) ([]string, error) {
	var words []string
	for {
		line = strings.TrimLeftFunc(line, unicode.IsSpace)
		if line == "" || line[0] == '#' {
			return words, nil
		}
		var w string
		if line[0] == '"' {
			end := strings.IndexByte(line[1:], '"')
			if end < 0 {
				return nil, fmt.Errorf("%q: unterminated quote", line)
			}
			w, line = line[1:end+1], line[end+2:]
		} else {
			end := strings.IndexFunc(line, unicode.IsSpace)
			if end < 0 {
				end = len(line)
			}
			w, line = line[:end], line[end:]
		}
		if strings.Contains(w, "{$") || strings.Contains(w, "{%") || w == "import" {
			return nil, fmt.Errorf("%q: an expansion of the Corefile reader", w)
		}
		words = append(words, w)
	}
}

// corefilePlugins are the plugins the harness's Corefile may use, and
// the only ones its CoreDNS may be built with (dnsbuild): none of them
// sends a query anywhere. Those that do (forward, grpc, the old proxy,
// etcd, route53, azure, clouddns, dnstap, secondary's transfers, ...) and
// every other are refused. hosts (answers from its own entries) and log
// are for the DNS server pods of the upstream specs, whose Corefile
// (e2e's generateCoreDNSConfigmap) names them; the agnhost image carries
// the same program as /coredns.
var corefilePlugins = []string{
	"errors", "health", "ready", "kubernetes", "prometheus", "cache", "loop", "reload", "loadbalance", "template", "hosts", "log",
}

// upstreamOptions are plugin options that send queries, or a plugin's
// requests, somewhere the Corefile does not show: "upstream" (the
// kubernetes plugin's and template's, for CNAME targets), a resolver
// read from a file, and the kubernetes plugin's API server other than
// the in-cluster one.
var upstreamOptions = []string{"upstream", "resolv.conf", "/etc/resolv.conf", "forward", "proxy", "endpoint", "kubeconfig"}

// clusterRanges are the only addresses the Corefile may name: the
// Service range, the pods' ClusterCIDR, and loopback.
var clusterRanges = []netip.Prefix{
	netip.MustParsePrefix(ServiceCIDR), netip.MustParsePrefix(ClusterCIDR),
	netip.MustParsePrefix("127.0.0.0/8"), netip.MustParsePrefix("::1/128"),
}

// wordAddr returns the address a word names, if any: an address, an
// address:port, a prefix, or a URL's host.
func wordAddr(w string) (netip.Addr, bool) {
	if u, err := url.Parse(w); err == nil && u.Host != "" {
		w = u.Hostname()
	}
	if a, err := netip.ParseAddr(w); err == nil {
		return a, true
	}
	if ap, err := netip.ParseAddrPort(w); err == nil {
		return ap.Addr(), true
	}
	if p, err := netip.ParsePrefix(w); err == nil {
		return p.Addr(), true
	}
	return netip.Addr{}, false
}

// corefileLeaks returns every reason the Corefile could send a query off
// the machine.
func corefileLeaks(servers []corefileBlock) []string {
	var leaks []string
	addrs := func(where string, words []string) {
		for _, w := range words {
			a, ok := wordAddr(w)
			if ok && !slices.ContainsFunc(clusterRanges, func(p netip.Prefix) bool { return p.Contains(a.Unmap()) }) {
				leaks = append(leaks, fmt.Sprintf("%s: %s is outside the cluster", where, w))
			}
		}
	}
	var options func(where string, b *corefileBlock)
	options = func(where string, b *corefileBlock) {
		for _, l := range b.lines {
			if slices.Contains(upstreamOptions, l.words[0]) {
				leaks = append(leaks, fmt.Sprintf("%s: option %q reaches past the cluster", where, strings.Join(l.words, " ")))
			}
			addrs(where, l.words)
			if l.block != nil {
				options(where+" "+l.words[0], l.block)
			}
		}
	}
	for _, s := range servers {
		for _, k := range s.keys {
			// zone[:port], with dns:// the only transport (no TLS, gRPC,
			// HTTPS listeners).
			if strings.Contains(k, "://") && !strings.HasPrefix(k, "dns://") {
				leaks = append(leaks, fmt.Sprintf("server %s: not a plain DNS server", k))
			}
		}
		where := "server " + strings.Join(s.keys, " ")
		for _, d := range s.lines {
			name := d.words[0]
			if !slices.Contains(corefilePlugins, name) {
				leaks = append(leaks, fmt.Sprintf("%s: plugin %q is not one that answers locally", where, name))
				continue
			}
			addrs(where+" "+name, d.words[1:])
			if d.block != nil {
				options(where+" "+name, d.block)
			}
		}
	}
	return leaks
}

// TestCorefileAnswersLocally fails if the Corefile DeployDNS ships could
// send a query anywhere: a plugin outside corefilePlugins (forward,
// proxy, grpc, ...), an option that resolves through an upstream, or an
// address outside the cluster. It also checks that every name has a
// server that answers it: the cluster's zones the kubernetes plugin, the
// rest NXDOMAIN.
func TestCorefileAnswersLocally(t *testing.T) {
	a, err := LoadDNSAddon()
	if err != nil {
		t.Fatal(err)
	}
	servers, err := parseCorefile(a.Corefile())
	if err != nil {
		t.Fatalf("Corefile: %v\n%s", err, a.Corefile())
	}
	for _, l := range corefileLeaks(servers) {
		t.Error(l)
	}
	zones := map[string]corefileBlock{}
	for _, s := range servers {
		for _, k := range s.keys {
			zone, port, _ := strings.Cut(strings.TrimPrefix(k, "dns://"), ":")
			if port != "53" {
				t.Errorf("server %s: port %q, want 53", k, port)
			}
			zones[zone] = s
		}
	}
	for _, z := range []string{ClusterDomain, "in-addr.arpa", "ip6.arpa"} {
		k := directive(zones[z], "kubernetes")
		if k == nil || !slices.Contains(k.words, z) {
			t.Errorf("zone %s: not answered by the kubernetes plugin", z)
			continue
		}
		if k.block != nil && slices.ContainsFunc(k.block.lines, func(l corefileLine) bool { return l.words[0] == "fallthrough" }) {
			t.Errorf("zone %s: the kubernetes plugin falls through, and no plugin after it answers", z)
		}
	}
	tmpl := directive(zones["."], "template")
	if tmpl == nil || tmpl.block == nil || !slices.ContainsFunc(tmpl.block.lines, func(l corefileLine) bool {
		return slices.Equal(l.words, []string{"rcode", "NXDOMAIN"})
	}) {
		t.Errorf("zone .: no template answering NXDOMAIN for the names outside the cluster")
	}
}

// directive returns the server block's line for the plugin, if any.
func directive(s corefileBlock, plugin string) *corefileLine {
	for i := range s.lines {
		if s.lines[i].words[0] == plugin {
			return &s.lines[i]
		}
	}
	return nil
}

// TestCorefileLeaks checks the checker: each Corefile here could send a
// query off the machine, and must be caught.
func TestCorefileLeaks(t *testing.T) {
	for _, tc := range []struct{ name, corefile string }{
		{"forward", ". {\n forward . /etc/resolv.conf\n}"},
		{"forward to an address", ". {\n forward . 8.8.8.8\n}"},
		{"proxy", ". {\n proxy . 1.1.1.1:53\n}"},
		{"grpc", ". {\n grpc . 192.0.2.1\n}"},
		{"upstream option", "cluster.local {\n kubernetes cluster.local {\n  upstream\n }\n}"},
		{"template upstream", ". {\n template IN A {\n  answer \"{{ .Name }} 60 IN CNAME x.example.\"\n  upstream 8.8.4.4\n }\n}"},
		{"api server outside", "cluster.local {\n kubernetes cluster.local {\n  endpoint https://203.0.113.5:6443\n }\n}"},
		{"TLS listener", "tls://.:853 {\n errors\n}"},
		{"address in an option", ". {\n health 192.0.2.7:8080\n}"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			servers, err := parseCorefile(tc.corefile)
			if err != nil {
				t.Fatal(err)
			}
			if leaks := corefileLeaks(servers); len(leaks) == 0 {
				t.Errorf("no leak found in\n%s", tc.corefile)
			} else {
				t.Log(leaks)
			}
		})
	}
	for _, tc := range []string{". {\n forward . {$UPSTREAM}\n}", ". {\n import more\n}"} {
		if _, err := parseCorefile(tc); err == nil {
			t.Errorf("parsed\n%s", tc)
		}
	}
}

// corednsModule is CoreDNS's Go module; corednsMain is the main package
// that builds the cluster's CoreDNS, relative to test/k8s.
const (
	corednsModule = "github.com/coredns/coredns"
	corednsMain   = "dnsbuild/coredns/main.go"
)

// pluginPackage is the package a directive's plugin is in: the directive's
// name, but for prometheus.
func pluginPackage(directive string) string {
	if directive == "prometheus" {
		return corednsModule + "/plugin/metrics"
	}
	return corednsModule + "/plugin/" + directive
}

// corednsBuildProblems reads the source of the CoreDNS build's main
// package: the plugins it lets a Corefile name (its plugins variable, of
// which it keeps CoreDNS's order) and the packages it imports. It returns
// every way that build could send a query off the machine (a plugin, or
// any package but the server and the plugins' own, outside
// corefilePlugins), or fail the Corefile, whose directives are given (a
// directive not compiled in).
func corednsBuildProblems(src []byte, corefile []string) ([]string, error) {
	f, err := parser.ParseFile(token.NewFileSet(), corednsMain, src, parser.SkipObjectResolution)
	if err != nil {
		return nil, err
	}
	var plugins []string
	found := false
	for _, d := range f.Decls {
		gd, ok := d.(*ast.GenDecl)
		if !ok || gd.Tok != token.VAR {
			continue
		}
		for _, spec := range gd.Specs {
			vs := spec.(*ast.ValueSpec)
			if len(vs.Names) != 1 || vs.Names[0].Name != "plugins" || len(vs.Values) != 1 {
				continue
			}
			lit, ok := vs.Values[0].(*ast.CompositeLit)
			if !ok {
				return nil, errors.New("plugins is not a []string literal")
			}
			for _, e := range lit.Elts {
				bl, ok := e.(*ast.BasicLit)
				if !ok || bl.Kind != token.STRING {
					return nil, fmt.Errorf("plugins holds %T, not a string", e)
				}
				name, err := strconv.Unquote(bl.Value)
				if err != nil {
					return nil, err
				}
				plugins = append(plugins, name)
			}
			found = true
		}
	}
	if !found {
		return nil, errors.New("no plugins variable")
	}

	var problems []string
	for _, p := range plugins {
		if !slices.Contains(corefilePlugins, p) {
			problems = append(problems, fmt.Sprintf("plugin %q is not one that answers locally", p))
		}
	}
	for _, d := range corefile {
		if !slices.Contains(plugins, d) {
			problems = append(problems, fmt.Sprintf("the Corefile's %q is not compiled in", d))
		}
	}
	imported := map[string]bool{}
	for _, imp := range f.Imports {
		path, err := strconv.Unquote(imp.Path.Value)
		if err != nil {
			return nil, err
		}
		imported[path] = true
		first, _, _ := strings.Cut(path, "/")
		switch {
		case !strings.Contains(first, "."):
			// The standard library.
		case path == corednsModule+"/core/dnsserver" || path == corednsModule+"/coremain":
			// The server and the command line, no plugin.
		case slices.ContainsFunc(plugins, func(p string) bool { return pluginPackage(p) == path }):
		default:
			// A plugin registers itself when imported: one outside
			// plugins is still linked in, as is the whole set behind
			// core/plugin.
			problems = append(problems, fmt.Sprintf("imports %s, which is none of the plugins", path))
		}
	}
	for _, p := range plugins {
		if !imported[pluginPackage(p)] {
			problems = append(problems, fmt.Sprintf("plugin %q: %s not imported", p, pluginPackage(p)))
		}
	}
	return problems, nil
}

// corefileDirectives are the plugins the Corefile's server blocks name.
func corefileDirectives(servers []corefileBlock) []string {
	var ds []string
	for _, s := range servers {
		for _, l := range s.lines {
			if !slices.Contains(ds, l.words[0]) {
				ds = append(ds, l.words[0])
			}
		}
	}
	return ds
}

// TestCoreDNSBuild checks the CoreDNS that DeployDNS runs
// (dnsbuild/coredns): its plugins are an allow-list of those that answer
// locally, so that no plugin that could send a query off the machine is
// compiled in, whatever the Corefile says; every plugin the shipped
// Corefile uses is; and dnsbuild/go.mod builds CoreDNSVersion.
func TestCoreDNSBuild(t *testing.T) {
	a, err := LoadDNSAddon()
	if err != nil {
		t.Fatal(err)
	}
	servers, err := parseCorefile(a.Corefile())
	if err != nil {
		t.Fatal(err)
	}
	mod, err := ModuleDir()
	if err != nil {
		t.Fatal(err)
	}
	src, err := os.ReadFile(filepath.Join(mod, corednsMain))
	if err != nil {
		t.Fatal(err)
	}
	problems, err := corednsBuildProblems(src, corefileDirectives(servers))
	if err != nil {
		t.Fatalf("%s: %v", corednsMain, err)
	}
	for _, p := range problems {
		t.Errorf("%s: %s", corednsMain, p)
	}
	if v, err := wrapperRequire(corednsBuild, corednsModule); err != nil || v != CoreDNSVersion {
		t.Errorf("%s/go.mod requires CoreDNS %q (%v), CoreDNSVersion is %s", corednsBuild, v, err, CoreDNSVersion)
	}
	if !strings.HasSuffix(corednsPkg, "/"+filepath.Dir(corednsMain)) {
		t.Errorf("CoreDNSBinary builds %s, this test reads %s", corednsPkg, corednsMain)
	}
}

// TestCoreDNSBuildProblems checks the checker: each main package here
// could send a query off the machine, or could not run the Corefile.
func TestCoreDNSBuildProblems(t *testing.T) {
	const good = `package main

import (
	"slices"

	"github.com/coredns/coredns/core/dnsserver"
	"github.com/coredns/coredns/coremain"

	_ "github.com/coredns/coredns/plugin/kubernetes"
	_ "github.com/coredns/coredns/plugin/metrics"
)

var plugins = []string{"kubernetes", "prometheus"}
`
	corefile := []string{"kubernetes", "prometheus"}
	if problems, err := corednsBuildProblems([]byte(good), corefile); err != nil || len(problems) > 0 {
		t.Fatalf("a good build: %v %v", problems, err)
	}
	for _, tc := range []struct{ name, old, new string }{
		{"forward listed", `"prometheus"}`, `"prometheus", "forward"}`},
		{"forward imported", `_ "github.com/coredns/coredns/plugin/metrics"`,
			`_ "github.com/coredns/coredns/plugin/metrics"; _ "github.com/coredns/coredns/plugin/forward"`},
		{"every plugin", `_ "github.com/coredns/coredns/plugin/metrics"`,
			`_ "github.com/coredns/coredns/plugin/metrics"; _ "github.com/coredns/coredns/core/plugin"`},
		{"a plugin from elsewhere", `_ "github.com/coredns/coredns/plugin/metrics"`,
			`_ "github.com/coredns/coredns/plugin/metrics"; _ "example.com/coredns/upstream"`},
		{"listed, not imported", `_ "github.com/coredns/coredns/plugin/metrics"`, ``},
		{"the Corefile's plugin missing", `"kubernetes", "prometheus"`, `"kubernetes"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			src := strings.Replace(good, tc.old, tc.new, 1)
			if src == good {
				t.Fatalf("%q not in the good build", tc.old)
			}
			problems, err := corednsBuildProblems([]byte(src), corefile)
			if err != nil {
				t.Fatal(err)
			}
			if len(problems) == 0 {
				t.Errorf("no problem found in\n%s", src)
			}
			t.Log(problems)
		})
	}
	if _, err := corednsBuildProblems([]byte("package main\n"), corefile); err == nil {
		t.Error("a main package without plugins passed")
	}
}

// TestDNSAddon checks what the cluster's kubelets and upstream's e2e
// tests rely on: the kube-dns Service at DNSServiceIP with k8s-app=kube-dns,
// its dns, dns-tcp and metrics ports, the image built here and never
// pulled, and the Corefile mounted where the image's arguments read it.
func TestDNSAddon(t *testing.T) {
	a, err := LoadDNSAddon()
	if err != nil {
		t.Fatal(err)
	}
	svc := a.Service
	if svc.Namespace != "kube-system" || svc.Name != "kube-dns" || svc.Labels["k8s-app"] != "kube-dns" {
		t.Errorf("service %s/%s labels %v: want kube-system/kube-dns with k8s-app=kube-dns", svc.Namespace, svc.Name, svc.Labels)
	}
	if svc.Spec.ClusterIP != DNSServiceIP {
		t.Errorf("service clusterIP %s, want %s", svc.Spec.ClusterIP, DNSServiceIP)
	}
	if !clusterRanges[0].Contains(netip.MustParseAddr(DNSServiceIP)) {
		t.Errorf("%s is outside the Service range %s", DNSServiceIP, clusterRanges[0])
	}
	var ports []string
	for _, p := range svc.Spec.Ports {
		ports = append(ports, fmt.Sprintf("%s %d/%s", p.Name, p.Port, p.Protocol))
	}
	if want := []string{"dns 53/UDP", "dns-tcp 53/TCP", "metrics 9153/TCP"}; !slices.Equal(ports, want) {
		t.Errorf("service ports %v, want %v", ports, want)
	}
	pod := a.Deployment.Spec.Template
	for k, v := range svc.Spec.Selector {
		if pod.Labels[k] != v {
			t.Errorf("service selects %s=%s, the pods are labelled %v", k, v, pod.Labels)
		}
	}
	c := pod.Spec.Containers[0]
	if c.Image != CoreDNSImage || c.ImagePullPolicy != "Never" {
		t.Errorf("container image %s (%s), want %s, never pulled", c.Image, c.ImagePullPolicy, CoreDNSImage)
	}
	if pod.Spec.DNSPolicy != "Default" {
		t.Errorf("dnsPolicy %s, want Default: CoreDNS must not resolve through itself", pod.Spec.DNSPolicy)
	}
	if !slices.Equal(c.Args, []string{"-conf", "/etc/coredns/Corefile"}) || len(c.VolumeMounts) != 1 || c.VolumeMounts[0].MountPath != "/etc/coredns" {
		t.Errorf("args %v, mounts %v: want the ConfigMap's Corefile at /etc/coredns/Corefile", c.Args, c.VolumeMounts)
	}
}
