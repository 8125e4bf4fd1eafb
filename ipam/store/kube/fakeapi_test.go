package kube

import (
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
)

// fakeAPI is an API server serving the podnet.io/v1 resources from
// memory, as much of one as the store uses: get, list (label selector,
// limit and continue), create, update and delete, the last two under a
// resourceVersion precondition. Its resourceVersions are not numbers:
// the store must take them as the opaque strings they are.
//
// A request must carry the bearer token token; fault, when set, sees
// every request first, with f.mu held, and may answer it instead.
type fakeAPI struct {
	srv *httptest.Server

	mu       sync.Mutex
	token    string
	objects  map[string]*fakeObject // by plural/name
	seq      int
	fault    func(r *http.Request) *fakeAnswer
	requests []string // "METHOD plural[/name]" of each request, faults included
	proto    map[string]int
}

type fakeObject struct {
	labels map[string]string
	spec   json.RawMessage
	rv     string
}

// fakeAnswer is an answer a fault gives in place of the fake's.
type fakeAnswer struct {
	code   int
	header map[string]string
	reason string
}

func newFakeAPI(t *testing.T) *fakeAPI {
	f := &fakeAPI{token: "good", objects: map[string]*fakeObject{}}
	f.srv = httptest.NewServer(http.HandlerFunc(f.serve))
	t.Cleanup(f.srv.Close)
	return f
}

// nextRV is a new resourceVersion: opaque, neither a number nor ordered
// as one; f.mu is held.
func (f *fakeAPI) nextRV() string {
	f.seq++
	return fmt.Sprintf("Zx%03x/%d=", f.seq*7919%4096, f.seq)
}

func (f *fakeAPI) setFault(fn func(r *http.Request) *fakeAnswer) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.fault = fn
}

// sent returns the requests so far.
func (f *fakeAPI) sent() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.requests)
}

// count is how many requests so far start with prefix ("PUT ipamblocks/").
func (f *fakeAPI) count(prefix string) int {
	n := 0
	for _, r := range f.sent() {
		if strings.HasPrefix(r, prefix) {
			n++
		}
	}
	return n
}

// touchLocked changes an object's resourceVersion, as another writer's
// update would; f.mu is held (a fault does it).
func (f *fakeAPI) touchLocked(object string) {
	if o := f.objects[object]; o != nil {
		o.rv = f.nextRV()
	}
}

func (f *fakeAPI) serve(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	path, ok := strings.CutPrefix(r.URL.Path, "/apis/"+Group+"/"+Version+"/")
	f.mu.Lock()
	defer f.mu.Unlock()
	f.requests = append(f.requests, r.Method+" "+path)
	if f.proto == nil {
		f.proto = map[string]int{}
	}
	f.proto[r.Proto]++
	if f.fault != nil {
		if a := f.fault(r); a != nil {
			for k, v := range a.header {
				w.Header().Set(k, v)
			}
			fakeStatus(w, a.code, a.reason, "injected "+a.reason)
			return
		}
	}
	if r.Header.Get("Authorization") != "Bearer "+f.token {
		fakeStatus(w, 401, "Unauthorized", "Unauthorized")
		return
	}
	plural, name, _ := strings.Cut(path, "/")
	if !ok || !slices.Contains([]string{"ippools", "ipamblocks", "ipamnodes"}, plural) {
		fakeStatus(w, 404, "NotFound", "the server could not find the requested resource")
		return
	}
	switch {
	case r.Method == "GET" && name == "":
		f.list(w, r, plural)
	case r.Method == "GET":
		if o := f.objects[path]; o != nil {
			fakeJSON(w, 200, o.json(name))
		} else {
			fakeStatus(w, 404, "NotFound", fmt.Sprintf("%s %q not found", plural, name))
		}
	case r.Method == "POST" && name == "":
		var in object
		if err := json.Unmarshal(body, &in); err != nil || in.Metadata.Name == "" {
			fakeStatus(w, 400, "BadRequest", fmt.Sprint("undecodable object: ", err))
			return
		}
		key := plural + "/" + in.Metadata.Name
		if f.objects[key] != nil {
			fakeStatus(w, 409, "AlreadyExists", fmt.Sprintf("%s %q already exists", plural, in.Metadata.Name))
			return
		}
		o := &fakeObject{labels: in.Metadata.Labels, spec: in.Spec, rv: f.nextRV()}
		f.objects[key] = o
		fakeJSON(w, 201, o.json(in.Metadata.Name))
	case r.Method == "PUT" && name != "":
		var in object
		if err := json.Unmarshal(body, &in); err != nil || in.Metadata.Name != name {
			fakeStatus(w, 400, "BadRequest", fmt.Sprint("undecodable object: ", err))
			return
		}
		o := f.objects[path]
		switch {
		case o == nil:
			fakeStatus(w, 404, "NotFound", fmt.Sprintf("%s %q not found", plural, name))
		case in.Metadata.ResourceVersion != o.rv:
			fakeStatus(w, 409, "Conflict", "the object has been modified; please apply your changes to the latest version and try again")
		default:
			o.labels, o.spec, o.rv = in.Metadata.Labels, in.Spec, f.nextRV()
			fakeJSON(w, 200, o.json(name))
		}
	case r.Method == "DELETE" && name != "":
		var in deleteOptions
		if len(body) > 0 {
			if err := json.Unmarshal(body, &in); err != nil {
				fakeStatus(w, 400, "BadRequest", fmt.Sprint("undecodable options: ", err))
				return
			}
		}
		o := f.objects[path]
		switch {
		case o == nil:
			fakeStatus(w, 404, "NotFound", fmt.Sprintf("%s %q not found", plural, name))
		case in.Preconditions.ResourceVersion != "" && in.Preconditions.ResourceVersion != o.rv:
			fakeStatus(w, 409, "Conflict", "Precondition failed: ResourceVersion in precondition does not match")
		default:
			delete(f.objects, path)
			fakeJSON(w, 200, map[string]string{"kind": "Status", "status": "Success"})
		}
	default:
		fakeStatus(w, 405, "MethodNotAllowed", r.Method+" is not allowed")
	}
}

// list answers a LIST: objects matching the label selector ("!key" or
// "key=value"), in name order, limit at a time, continuing after the
// name the continue token holds.
func (f *fakeAPI) list(w http.ResponseWriter, r *http.Request, plural string) {
	q := r.URL.Query()
	sel := q.Get("labelSelector")
	match := func(labels map[string]string) bool {
		if k, ok := strings.CutPrefix(sel, "!"); ok {
			_, has := labels[k]
			return !has
		}
		k, v, _ := strings.Cut(sel, "=")
		return sel == "" || labels[k] == v
	}
	var names []string
	for key, o := range f.objects {
		p, name, _ := strings.Cut(key, "/")
		if p == plural && match(o.labels) && name > q.Get("continue") {
			names = append(names, name)
		}
	}
	slices.Sort(names)
	var out struct {
		Metadata struct {
			Continue string `json:"continue,omitempty"`
		} `json:"metadata"`
		Items []any `json:"items"`
	}
	out.Items = []any{}
	if limit, _ := strconv.Atoi(q.Get("limit")); limit > 0 && len(names) > limit {
		names = names[:limit]
		out.Metadata.Continue = names[limit-1]
	}
	for _, name := range names {
		out.Items = append(out.Items, f.objects[plural+"/"+name].json(name))
	}
	fakeJSON(w, 200, out)
}

func (o *fakeObject) json(name string) any {
	return object{APIVersion: Group + "/" + Version, Metadata: meta{Name: name, ResourceVersion: o.rv, Labels: o.labels}, Spec: o.spec}
}

func fakeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	json.NewEncoder(w).Encode(v)
}

func fakeStatus(w http.ResponseWriter, code int, reason, msg string) {
	fakeJSON(w, code, map[string]any{"kind": "Status", "apiVersion": "v1", "status": "Failure",
		"message": msg, "reason": reason, "code": code})
}

// kubeconfig writes a kubeconfig for f with token, or with a tokenFile
// holding it when file is set, and returns its path.
func (f *fakeAPI) kubeconfig(t *testing.T, token string, file bool) string {
	t.Helper()
	dir := t.TempDir()
	user := fmt.Sprintf(`{"token":%q}`, token)
	if file {
		if err := os.WriteFile(filepath.Join(dir, "token"), []byte(token+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		user = `{"tokenFile":"token"}`
	}
	kc := filepath.Join(dir, "kubeconfig.json")
	cfg := fmt.Sprintf(`{"current-context":"c","contexts":[{"name":"c","context":{"cluster":"k","user":"u"}}],
	  "clusters":[{"name":"k","cluster":{"server":%q}}],"users":[{"name":"u","user":%s}]}`, f.srv.URL, user)
	if err := os.WriteFile(kc, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	return kc
}

// open opens a store on f at prefix with a good token.
func (f *fakeAPI) open(t *testing.T, prefix string) *Store {
	t.Helper()
	return openAt(t, f.kubeconfig(t, f.token, false), prefix)
}

func openAt(t *testing.T, kubeconfig, prefix string) *Store {
	t.Helper()
	s, err := Open(Options{Kubeconfig: kubeconfig, Prefix: prefix})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// newNetHTTP is kubehttp.New, which this package's tests cannot import
// (kubehttp imports kube): kubehttp_test.go, of package kube_test, sets
// it.
var newNetHTTP func(rt http.RoundTripper, host string) (Transport, error)

// newFakeAPIH2 is newFakeAPI serving HTTPS and HTTP/2, as an API server
// does to client-go.
func newFakeAPIH2(t *testing.T) *fakeAPI {
	f := &fakeAPI{token: "good", objects: map[string]*fakeObject{}}
	f.srv = httptest.NewUnstartedServer(http.HandlerFunc(f.serve))
	f.srv.EnableHTTP2 = true
	f.srv.StartTLS()
	t.Cleanup(f.srv.Close)
	return f
}

// bearer adds a bearer token to each request, as client-go's round
// tripper does.
type bearer struct {
	token string
	rt    http.RoundTripper
}

func (b bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.token)
	return b.rt.RoundTrip(r)
}

// openHTTP opens a store on f at prefix through a net/http round tripper
// sending token.
func (f *fakeAPI) openHTTP(t *testing.T, prefix, token string) *Store {
	t.Helper()
	if newNetHTTP == nil {
		t.Fatal("kubehttp_test.go did not set newNetHTTP")
	}
	tr, err := newNetHTTP(bearer{token, f.srv.Client().Transport}, f.srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	s, err := Open(Options{Transport: tr, Kubeconfig: "(test credentials)", Prefix: prefix})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// transports are the two ways to the API server: minihttp with a
// kubeconfig (a plugin), and a net/http round tripper over HTTP/2 (the
// agent and the CLI, with client-go's). creds is how messages name the
// credentials.
var transports = []struct {
	name  string
	fake  func(t *testing.T) *fakeAPI
	open  func(f *fakeAPI, t *testing.T, prefix, token string) *Store
	creds string
}{
	{"minihttp", newFakeAPI, func(f *fakeAPI, t *testing.T, prefix, token string) *Store {
		return openAt(t, f.kubeconfig(t, token, false), prefix)
	}, "kubeconfig.json"},
	{"nethttp2", newFakeAPIH2, (*fakeAPI).openHTTP, "(test credentials)"},
}

// protos counts the requests by protocol ("HTTP/2.0").
func (f *fakeAPI) protos() map[string]int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return maps.Clone(f.proto)
}
