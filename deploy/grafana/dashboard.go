// Package grafana holds podnet's Grafana dashboard (podnet.json) and
// what its judges need of it, pure: the metric names each panel's
// queries select (Dashboard.Metrics) and the series names of a scrape
// (MetricNames). test/k8s scrapes the agents of a real cluster and
// fails naming each panel that queries a metric no agent exports.
package grafana

import (
	_ "embed"
	"encoding/json"
	"fmt"
	"regexp"
	"sort"
	"strings"
)

// JSON is the dashboard as shipped, deploy/grafana/podnet.json.
//
//go:embed podnet.json
var JSON []byte

// Dashboard is what the judges read of a dashboard JSON model.
type Dashboard struct {
	SchemaVersion int     `json:"schemaVersion"`
	Panels        []Panel `json:"panels"`
}

// Panel is a panel or a row of panels.
type Panel struct {
	Title   string `json:"title"`
	Type    string `json:"type"`
	Targets []struct {
		Expr string `json:"expr"`
	} `json:"targets"`
	Panels []Panel `json:"panels"` // a collapsed row's
}

// Parse reads a dashboard JSON model.
func Parse(b []byte) (Dashboard, error) {
	var d Dashboard
	if err := json.Unmarshal(b, &d); err != nil {
		return d, fmt.Errorf("dashboard: %w", err)
	}
	return d, nil
}

// Queries are the PromQL expressions of every panel, by "row/panel"
// title ("/panel" for a panel outside any row).
func (d Dashboard) Queries() map[string][]string {
	out := map[string][]string{}
	row := ""
	var walk func(ps []Panel, inRow bool)
	walk = func(ps []Panel, inRow bool) {
		for _, p := range ps {
			if p.Type == "row" {
				row = p.Title
				walk(p.Panels, true)
				continue
			}
			for _, tg := range p.Targets {
				out[row+"/"+p.Title] = append(out[row+"/"+p.Title], tg.Expr)
			}
		}
	}
	walk(d.Panels, false)
	return out
}

// Metrics are the metric names every panel's queries select, by the
// Queries key.
func (d Dashboard) Metrics() map[string][]string {
	out := map[string][]string{}
	for panel, qs := range d.Queries() {
		seen := map[string]bool{}
		for _, q := range qs {
			for _, m := range QueryMetrics(q) {
				seen[m] = true
			}
		}
		out[panel] = SortedKeys(seen)
	}
	return out
}

var (
	stringLit  = regexp.MustCompile(`"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*'`)
	braces     = regexp.MustCompile(`\{[^}]*\}|\[[^\]]*\]`)
	labelLists = regexp.MustCompile(`\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)`)
	durations  = regexp.MustCompile(`\b\d+(?:\.\d+)?(?:ms|[smhdwy])+\b`)
	identifier = regexp.MustCompile(`[a-zA-Z_:][a-zA-Z0-9_:]*\s*\(?`)
	keywords   = map[string]bool{"by": true, "without": true, "on": true, "ignoring": true, "group_left": true, "group_right": true,
		"bool": true, "and": true, "or": true, "unless": true, "offset": true, "atan2": true, "inf": true, "nan": true}
)

// QueryMetrics are the metric names a PromQL expression selects: its
// identifiers, less function calls (an identifier before a parenthesis),
// keywords, label matchers and grouping labels, strings and durations
// (offset 5m).
func QueryMetrics(q string) []string {
	q = stringLit.ReplaceAllString(q, `""`)
	q = braces.ReplaceAllString(q, " ")
	q = labelLists.ReplaceAllString(q, " ")
	q = durations.ReplaceAllString(q, " ")
	seen := map[string]bool{}
	for _, m := range identifier.FindAllString(q, -1) {
		if strings.HasSuffix(m, "(") {
			continue
		}
		name := strings.TrimSpace(m)
		if keywords[strings.ToLower(name)] {
			continue
		}
		seen[name] = true
	}
	return SortedKeys(seen)
}

// MetricNames are the series names of a Prometheus text exposition: the
// families of its TYPE lines (a histogram's with _bucket, _sum and
// _count) and the names of its samples.
func MetricNames(exposition string) map[string]bool {
	names := map[string]bool{}
	for _, line := range strings.Split(exposition, "\n") {
		if f := strings.Fields(line); len(f) == 4 && f[0] == "#" && f[1] == "TYPE" {
			names[f[2]] = true
			if f[3] == "histogram" || f[3] == "summary" {
				names[f[2]+"_sum"], names[f[2]+"_count"] = true, true
			}
			if f[3] == "histogram" {
				names[f[2]+"_bucket"] = true
			}
			continue
		}
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		name, _, _ := strings.Cut(line, "{")
		name, _, _ = strings.Cut(name, " ")
		names[name] = true
	}
	return names
}

// Missing are, by panel, the metrics a panel queries that exported (a
// MetricNames set) lacks, for the panels keep selects (nil: all).
func (d Dashboard) Missing(exported map[string]bool, keep func(panel string) bool) map[string][]string {
	out := map[string][]string{}
	for panel, ms := range d.Metrics() {
		if keep != nil && !keep(panel) {
			continue
		}
		for _, m := range ms {
			if !exported[m] {
				out[panel] = append(out[panel], m)
			}
		}
	}
	return out
}

// SortedKeys are m's keys in order.
func SortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
