package flowui

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"sync"

	"github.com/podnet/podnet/flows"
)

// Source is where the page's records come from: the agents' flows API,
// with its query parameters (namespace, pod, verdict, protocol, port,
// node, policy, limit) passed on as they are.
type Source interface {
	// List returns the records the agents hold that match query, oldest
	// first.
	List(ctx context.Context, query url.Values) ([]flows.Record, error)
	// Follow calls fn with the records the agents hold that match query
	// (the newest limit of each agent's, oldest first), then with each
	// new one as it comes, until ctx ends (then it returns nil), a
	// stream fails, or fn returns an error. fn is never called
	// concurrently; records of different agents interleave.
	Follow(ctx context.Context, query url.Values, fn func(flows.Record) error) error
}

// QueryParams are the flows API's query parameters the page passes on;
// any other parameter of a request is dropped, and follow is the
// Source's choice of method.
var QueryParams = []string{"namespace", "pod", "verdict", "protocol", "port", "node", "policy", "limit"}

// keep returns the flows API's parameters of query, each with all its
// values (the API takes a parameter repeated or comma-separated).
func keep(query url.Values) url.Values {
	q := url.Values{}
	for _, k := range QueryParams {
		for _, v := range query[k] {
			if v != "" {
				q.Add(k, v)
			}
		}
	}
	return q
}

// maxLine bounds one NDJSON line an agent sends (a record with many
// rules is a few KiB).
const maxLine = 1 << 20

// AgentError is an agent's answer other than 200 OK. Status 400 means
// the query was refused (the agent's message names the parameter).
type AgentError struct {
	URL     string
	Status  int
	Message string
}

func (e *AgentError) Error() string {
	return fmt.Sprintf("agent %s: %d %s: %s", e.URL, e.Status, http.StatusText(e.Status), e.Message)
}

// AgentSource reads the flows API of agents by base URL (GET
// <url>/flows), plain HTTP.
type AgentSource struct {
	URLs   []string
	Client *http.Client // nil: a client without a timeout (follow streams last)
}

// NewAgentSource checks the agents' base URLs (http or https, with a
// host) and returns their Source.
func NewAgentSource(urls []string) (*AgentSource, error) {
	if len(urls) == 0 {
		return nil, errors.New("no agent URL")
	}
	for _, raw := range urls {
		u, err := url.Parse(raw)
		if err != nil {
			return nil, fmt.Errorf("agent URL %q: %w", raw, err)
		}
		if (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return nil, fmt.Errorf("agent URL %q: want http://host:port or https://host:port", raw)
		}
	}
	return &AgentSource{URLs: urls}, nil
}

func (s *AgentSource) client() *http.Client {
	if s.Client != nil {
		return s.Client
	}
	return http.DefaultClient
}

// List asks every agent at once and merges their records by time; with
// a limit, the newest limit of them.
func (s *AgentSource) List(ctx context.Context, query url.Values) ([]flows.Record, error) {
	results := make([][]flows.Record, len(s.URLs))
	errs := make([]error, len(s.URLs))
	var wg sync.WaitGroup
	for i, base := range s.URLs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = s.stream(ctx, base, query, false, func(r flows.Record) error {
				results[i] = append(results[i], r)
				return nil
			})
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	var all []flows.Record
	for _, rs := range results {
		all = append(all, rs...)
	}
	sort.SliceStable(all, func(i, j int) bool { return all[i].Time.Before(all[j].Time) })
	if n, err := strconv.Atoi(query.Get("limit")); err == nil && n > 0 && len(all) > n {
		all = all[len(all)-n:]
	}
	return all, nil
}

// Follow follows every agent at once; the first stream to fail, or to
// end on its own (the agent shut down), ends them all.
func (s *AgentSource) Follow(ctx context.Context, query url.Values, fn func(flows.Record) error) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var mu sync.Mutex
	serial := func(r flows.Record) error {
		mu.Lock()
		defer mu.Unlock()
		return fn(r)
	}
	type ended struct {
		url string
		err error
	}
	endc := make(chan ended, len(s.URLs))
	for _, u := range s.URLs {
		go func() { endc <- ended{u, s.stream(ctx, u, query, true, serial)} }()
	}
	var first error
	for range s.URLs {
		e := <-endc
		if first != nil || ctx.Err() != nil {
			continue
		}
		first = e.err
		if first == nil {
			first = fmt.Errorf("agent %s: follow stream ended", e.url)
		}
		cancel()
	}
	return first
}

// stream reads one agent's NDJSON answer into fn.
func (s *AgentSource) stream(ctx context.Context, baseURL string, query url.Values, follow bool, fn func(flows.Record) error) error {
	q := keep(query)
	if follow {
		q.Set("follow", "true")
	}
	u := strings.TrimRight(baseURL, "/") + "/flows"
	if len(q) > 0 {
		u += "?" + q.Encode()
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return fmt.Errorf("agent %s: %w", baseURL, err)
	}
	req.Header.Set("Accept", "application/x-ndjson")
	resp, err := s.client().Do(req)
	if err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return fmt.Errorf("agent %s: %w", baseURL, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		return &AgentError{URL: baseURL, Status: resp.StatusCode, Message: strings.TrimSpace(string(msg))}
	}
	return decode(ctx, baseURL, resp.Body, fn)
}

// decode reads NDJSON records from r into fn; the end of ctx is not an
// error.
func decode(ctx context.Context, baseURL string, r io.Reader, fn func(flows.Record) error) error {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), maxLine)
	line := 0
	for sc.Scan() {
		line++
		b := sc.Bytes()
		if len(strings.TrimSpace(string(b))) == 0 {
			continue
		}
		var rec flows.Record
		if err := json.Unmarshal(b, &rec); err != nil {
			return fmt.Errorf("agent %s: record on line %d: %w", baseURL, line, err)
		}
		if err := fn(rec); err != nil {
			return err
		}
	}
	if err := sc.Err(); err != nil && ctx.Err() == nil {
		return fmt.Errorf("agent %s: reading records: %w", baseURL, err)
	}
	return nil
}
