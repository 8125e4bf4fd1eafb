package interop

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// Host-side names that plugins make up at random.
var (
	vethName = regexp.MustCompile(`\bveth[0-9a-f]{8}\b`)
	macAddr  = regexp.MustCompile(`\b[0-9a-f]{2}(:[0-9a-f]{2}){5}\b`)
	linkLoc  = regexp.MustCompile(`\bfe80::[0-9a-f:]+`)
)

// normalizer rewrites what legitimately differs between two runs of one
// configuration: paths of the namespaces and temp dirs of each side, and
// the random host veth names, MACs and the link-local addresses derived
// from them.
type normalizer struct {
	repl *strings.Replacer
	keep map[string]bool // MACs a configuration fixes; they must be equal
}

func newNormalizer(keepMACs []string, oldnew ...string) *normalizer {
	n := &normalizer{repl: strings.NewReplacer(oldnew...), keep: map[string]bool{}}
	for _, m := range keepMACs {
		n.keep[m] = true
	}
	return n
}

func (n *normalizer) text(s string) string {
	s = n.repl.Replace(s)
	s = vethName.ReplaceAllString(s, "VETH")
	s = linkLoc.ReplaceAllString(s, "LINKLOCAL")
	return macAddr.ReplaceAllStringFunc(s, func(m string) string {
		if n.keep[m] {
			return m
		}
		return "MAC"
	})
}

// json returns the document normalized and re-encoded with sorted keys
// and indentation, so that two of them compare as text and diff readably.
// It compares meaning, not spelling: empty values ("dns": {}) count as
// absent, and the "version" of an ips entry (0.3.x/0.4.0), which only
// repeats the address family, is left out; upstream plugins print it
// empty or not at all (see TestResultVersionField).
func (n *normalizer) json(t testing.TB, b []byte) string {
	t.Helper()
	var v any
	if err := json.Unmarshal([]byte(n.text(string(b))), &v); err != nil {
		t.Fatalf("not JSON: %v: %s", err, b)
	}
	v, _ = semantic(v, "")
	out, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	return string(out)
}

// semantic drops empty values and ips[].version from a decoded JSON
// document; it reports whether v itself is empty.
func semantic(v any, key string) (any, bool) {
	switch x := v.(type) {
	case map[string]any:
		for k, e := range x {
			if key == "ips" && k == "version" {
				delete(x, k)
				continue
			}
			var empty bool
			if x[k], empty = semantic(e, k); empty {
				delete(x, k)
			}
		}
		return x, len(x) == 0
	case []any:
		for i, e := range x {
			x[i], _ = semantic(e, key)
		}
		return x, len(x) == 0
	case string:
		return x, x == ""
	case nil:
		return x, true
	}
	return v, false
}

// snapshot describes the network state of a namespace as sorted lines:
// links, addresses, routes of every table, iptables and nftables rules,
// qdiscs. Counters and kernel-chosen indexes are left out.
func snapshot(t testing.TB, n netNS, norm *normalizer) []string {
	t.Helper()
	var lines []string
	var links []struct {
		Name     string   `json:"ifname"`
		Flags    []string `json:"flags"`
		MTU      int      `json:"mtu"`
		Master   string   `json:"master"`
		Promisc  int      `json:"promiscuity"`
		TxQLen   int      `json:"txqlen"`
		LinkInfo struct {
			Kind string `json:"info_kind"`
		} `json:"linkinfo"`
	}
	decode(t, run(t, "ip", "-n", n.Name, "-d", "-j", "link", "show"), &links)
	var addrs []struct {
		Name     string `json:"ifname"`
		AddrInfo []struct {
			Local     string `json:"local"`
			PrefixLen int    `json:"prefixlen"`
			Scope     string `json:"scope"`
		} `json:"addr_info"`
	}
	decode(t, run(t, "ip", "-n", n.Name, "-j", "addr", "show"), &addrs)
	for _, l := range links {
		lines = append(lines, fmt.Sprintf("link %s kind=%s up=%v mtu=%d master=%s promisc=%d txqlen=%d",
			l.Name, l.LinkInfo.Kind, slices.Contains(l.Flags, "UP"), l.MTU, l.Master, l.Promisc, l.TxQLen))
	}
	for _, a := range addrs {
		for _, ai := range a.AddrInfo {
			lines = append(lines, fmt.Sprintf("addr %s %s/%d scope %s", a.Name, ai.Local, ai.PrefixLen, ai.Scope))
		}
	}
	for _, fam := range []string{"-4", "-6"} {
		var routes []map[string]any
		decode(t, run(t, "ip", "-n", n.Name, fam, "-j", "route", "show", "table", "all"), &routes)
		for _, r := range routes {
			lines = append(lines, fmt.Sprintf("route%s %v dst=%v gw=%v dev=%v proto=%v scope=%v table=%v",
				fam, r["type"], r["dst"], r["gateway"], r["dev"], r["protocol"], r["scope"], r["table"]))
		}
	}
	for _, tool := range []string{"iptables-save", "ip6tables-save"} {
		for _, l := range strings.Split(n.run(t, tool), "\n") {
			if l == "" || strings.HasPrefix(l, "#") {
				continue
			}
			if strings.HasPrefix(l, ":") { // ":CHAIN POLICY [packets:bytes]"
				l, _, _ = strings.Cut(l, " [")
			}
			lines = append(lines, tool+" "+l)
		}
	}
	lines = append(lines, nftLines(n.run(t, "nft", "list", "ruleset"))...)
	for _, l := range strings.Split(n.run(t, "tc", "qdisc", "show"), "\n") {
		if l != "" {
			lines = append(lines, "tc "+l)
		}
	}
	for i := range lines {
		lines[i] = norm.text(lines[i])
	}
	slices.Sort(lines)
	return lines
}

// nftLines flattens `nft list ruleset` into one line per statement,
// each prefixed with its table and chain, so that sorted lines still say
// where a rule is.
func nftLines(ruleset string) []string {
	var out, ctx []string
	for _, l := range strings.Split(ruleset, "\n") {
		l = strings.TrimSpace(l)
		switch {
		case l == "" || strings.HasPrefix(l, "#"):
		case strings.HasSuffix(l, "{"):
			ctx = append(ctx, strings.TrimSpace(strings.TrimSuffix(l, "{")))
			out = append(out, "nft "+strings.Join(ctx, " / "))
		case l == "}":
			if len(ctx) > 0 {
				ctx = ctx[:len(ctx)-1]
			}
		default:
			out = append(out, "nft "+strings.Join(ctx, " / ")+": "+l)
		}
	}
	return out
}

func decode(t testing.TB, s string, v any) {
	t.Helper()
	if err := json.Unmarshal([]byte(s), v); err != nil {
		t.Fatalf("decode %q: %v", s, err)
	}
}

// diffLines says which lines only a has and which only b has; "" when
// the two are equal.
func diffLines(aName string, a []string, bName string, b []string) string {
	var buf bytes.Buffer
	for _, l := range a {
		if !slices.Contains(b, l) {
			fmt.Fprintf(&buf, "  only %s: %s\n", aName, l)
		}
	}
	for _, l := range b {
		if !slices.Contains(a, l) {
			fmt.Fprintf(&buf, "  only %s: %s\n", bName, l)
		}
	}
	if buf.Len() == 0 && len(a) != len(b) {
		fmt.Fprintf(&buf, "  same lines, different multiplicity: %d vs %d\n", len(a), len(b))
	}
	return buf.String()
}

// diffText is a line diff of two multi-line texts, for test messages.
func diffText(aName, a, bName, b string) string {
	if a == b {
		return ""
	}
	al, bl := strings.Split(a, "\n"), strings.Split(b, "\n")
	return diffLines(aName, al, bName, bl) + fmt.Sprintf("--- %s\n%s\n--- %s\n%s\n", aName, a, bName, b)
}

// filesIn lists the names of the regular files under dir, recursively,
// relative to dir.
func filesIn(t testing.TB, dir string) []string {
	t.Helper()
	var out []string
	err := filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.Type().IsRegular() {
			rel, _ := filepath.Rel(dir, p)
			out = append(out, rel)
		}
		return nil
	})
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	return out
}
