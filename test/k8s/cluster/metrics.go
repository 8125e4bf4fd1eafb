package cluster

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"math"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"
)

// ContainerdMetricsAddr is where containerd serves its Prometheus
// metrics: loopback in the node's namespace, so only DialContext reaches
// it and two clusters on one machine never collide.
const ContainerdMetricsAddr = "127.0.0.1:1338"

// The CRI plugin's timers in containerd 1.6 (pkg/cri/server/metrics.go,
// go-metrics timers, hence "_seconds" histograms): the time of the CNI
// ADD of a sandbox's networks (loopback and the default network) in
// RunPodSandbox, of their DEL in StopPodSandbox, and of the sandbox's
// creation in the runtime (runc), labelled by runtime.
const (
	MetricSandboxCreateNetwork = "containerd_cri_sandbox_create_network_seconds"
	MetricSandboxDeleteNetwork = "containerd_cri_sandbox_delete_network_seconds"
	MetricSandboxRuntimeCreate = "containerd_cri_sandbox_runtime_create_seconds"
)

// Bucket is a histogram bucket: Count observations were <= UpperBound.
type Bucket struct {
	UpperBound float64
	Count      float64
}

// Histogram is one series of a Prometheus histogram: cumulative buckets
// by ascending bound (the last +Inf), their sum and count.
type Histogram struct {
	Buckets    []Bucket
	Sum, Count float64
}

// Histograms are the histogram series of a scrape, by name and labels
// (without le) as Prometheus writes them, e.g.
// `containerd_cri_sandbox_runtime_create_seconds{runtime="io.containerd.runc.v2"}`.
type Histograms map[string]Histogram

// Merged adds up every series of the histogram called name, whatever
// their labels.
func (hs Histograms) Merged(name string) Histogram {
	var out Histogram
	for series, h := range hs {
		if series == name || strings.HasPrefix(series, name+"{") {
			out = out.add(h, 1)
		}
	}
	return out
}

// Sub is the histogram of what was observed between the scrape of prev
// and that of h (counters only grow while containerd runs).
func (h Histogram) Sub(prev Histogram) Histogram {
	return h.add(prev, -1)
}

func (h Histogram) add(o Histogram, sign float64) Histogram {
	out := Histogram{Sum: h.Sum + sign*o.Sum, Count: h.Count + sign*o.Count}
	bounds := map[float64]float64{}
	for _, b := range h.Buckets {
		bounds[b.UpperBound] += b.Count
	}
	for _, b := range o.Buckets {
		bounds[b.UpperBound] += sign * b.Count
	}
	for ub, n := range bounds {
		out.Buckets = append(out.Buckets, Bucket{UpperBound: ub, Count: n})
	}
	slices.SortFunc(out.Buckets, func(a, b Bucket) int { return cmpFloat(a.UpperBound, b.UpperBound) })
	return out
}

func cmpFloat(a, b float64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// Mean is the average observation, exact (sum over count); NaN if none.
func (h Histogram) Mean() float64 {
	if h.Count == 0 {
		return math.NaN()
	}
	return h.Sum / h.Count
}

// Quantile estimates the q-quantile the way PromQL's histogram_quantile
// does: linear interpolation inside the bucket it falls in (from 0 for
// the first). It can only be as fine as the buckets (containerd's are
// Prometheus' defaults: 5 ms ... 10 s); a quantile in the +Inf bucket is
// the highest finite bound (Overflows tells). NaN if there are no
// observations.
func (h Histogram) Quantile(q float64) float64 {
	if h.Count == 0 || len(h.Buckets) == 0 {
		return math.NaN()
	}
	rank := q * h.Count
	lower, below := 0.0, 0.0
	for _, b := range h.Buckets {
		if b.Count >= rank && b.Count > below {
			if math.IsInf(b.UpperBound, 1) {
				return lower
			}
			return lower + (b.UpperBound-lower)*(rank-below)/(b.Count-below)
		}
		if !math.IsInf(b.UpperBound, 1) {
			lower = b.UpperBound
		}
		below = b.Count
	}
	return lower
}

// Overflows says whether the q-quantile lies beyond the highest finite
// bound, where Quantile can only give that bound.
func (h Histogram) Overflows(q float64) bool {
	finite := 0.0
	for _, b := range h.Buckets {
		if !math.IsInf(b.UpperBound, 1) {
			finite = b.Count
		}
	}
	return h.Count > 0 && q*h.Count > finite
}

// ContainerdHistograms scrapes the node's containerd's metrics endpoint.
func (n *Node) ContainerdHistograms(ctx context.Context) (Histograms, error) {
	hc := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{DialContext: n.DialContext, DisableKeepAlives: true}}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+ContainerdMetricsAddr+"/v1/metrics", nil)
	if err != nil {
		return nil, err
	}
	resp, err := hc.Do(req)
	if err != nil {
		return nil, fmt.Errorf("containerd metrics: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("containerd metrics: %s", resp.Status)
	}
	return ParseHistograms(resp.Body)
}

// ParseHistograms reads the histograms out of Prometheus' text format
// (the families whose TYPE is histogram); other samples are skipped.
func ParseHistograms(r io.Reader) (Histograms, error) {
	hs := Histograms{}
	kinds := map[string]string{}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if f := strings.Fields(line); len(f) == 4 && f[0] == "#" && f[1] == "TYPE" {
			kinds[f[2]] = f[3]
			continue
		}
		if line == "" || line[0] == '#' {
			continue
		}
		if err := addSample(hs, kinds, line); err != nil {
			return nil, err
		}
	}
	return hs, sc.Err()
}

// addSample adds a _bucket, _sum or _count sample of a histogram family
// to its series in hs.
func addSample(hs Histograms, kinds map[string]string, line string) error {
	name, labels, value, err := parseSample(line)
	if err != nil {
		return err
	}
	for _, suffix := range []string{"_bucket", "_sum", "_count"} {
		base, ok := strings.CutSuffix(name, suffix)
		if !ok || kinds[base] != "histogram" {
			continue
		}
		le, rest := "", make([]string, 0, len(labels))
		for _, l := range labels {
			if v, ok := strings.CutPrefix(l, "le="); ok {
				le = v
			} else {
				rest = append(rest, l)
			}
		}
		series := base
		if len(rest) > 0 {
			series += "{" + strings.Join(rest, ",") + "}"
		}
		h := hs[series]
		switch suffix {
		case "_sum":
			h.Sum = value
		case "_count":
			h.Count = value
		default:
			ub, err := strconv.ParseFloat(strings.Trim(le, `"`), 64)
			if err != nil {
				return fmt.Errorf("metrics: bucket bound in %q: %w", line, err)
			}
			h.Buckets = append(h.Buckets, Bucket{UpperBound: ub, Count: value})
		}
		hs[series] = h
		return nil
	}
	return nil
}

// parseSample splits `name{a="x",b="y"} value [timestamp]` into its
// name, its labels as written (`a="x"`), and its value.
func parseSample(line string) (name string, labels []string, value float64, err error) {
	rest := line
	if i := strings.IndexAny(line, "{ "); i >= 0 && line[i] == '{' {
		name = line[:i]
		rest = line[i+1:]
		for {
			rest = strings.TrimLeft(rest, ", ")
			if strings.HasPrefix(rest, "}") {
				rest = rest[1:]
				break
			}
			l, r, ok := cutLabel(rest)
			if !ok {
				return "", nil, 0, fmt.Errorf("metrics: malformed labels in %q", line)
			}
			labels, rest = append(labels, l), r
		}
	} else {
		name, rest, _ = strings.Cut(line, " ")
	}
	f := strings.Fields(rest)
	if len(f) == 0 {
		return "", nil, 0, fmt.Errorf("metrics: no value in %q", line)
	}
	value, err = strconv.ParseFloat(f[0], 64)
	if err != nil {
		return "", nil, 0, fmt.Errorf("metrics: value in %q: %w", line, err)
	}
	return name, labels, value, nil
}

// cutLabel cuts `key="value"` (the value may hold escaped quotes) off
// the front of s.
func cutLabel(s string) (label, rest string, ok bool) {
	eq := strings.Index(s, `="`)
	if eq < 0 {
		return "", "", false
	}
	for i := eq + 2; i < len(s); i++ {
		switch s[i] {
		case '\\':
			i++
		case '"':
			return s[:i+1], s[i+1:], true
		}
	}
	return "", "", false
}
