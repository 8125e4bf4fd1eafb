package flowui

import (
	"embed"
	"encoding/json"
	"errors"
	"io/fs"
	"net/http"

	"github.com/podnet/podnet/flows"
)

//go:embed static
var static embed.FS

// contentPolicy lets the page load nothing but its own files and talk to
// nothing but its own API.
const contentPolicy = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"

// Handler serves the page and /api/flows over a Source.
type Handler struct {
	src    Source
	label  string
	static http.Handler
}

// New returns the page's handler over src; label says in the page where
// the records come from (e.g. the agents' URLs).
func New(src Source, label string) *Handler {
	sub, err := fs.Sub(static, "static")
	if err != nil {
		panic(err) // the embedded tree is fixed at build time
	}
	return &Handler{src: src, label: label, static: http.FileServerFS(sub)}
}

// ServeHTTP answers GET only, and only for a loopback Host.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if !loopbackHost(r.Host) {
		http.Error(w, "podnet ui answers requests for a loopback address or localhost only", http.StatusMisdirectedRequest)
		return
	}
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
		return
	}
	w.Header().Set("Content-Security-Policy", contentPolicy)
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.Header().Set("Referrer-Policy", "no-referrer")
	switch r.URL.Path {
	case "/api/flows":
		h.flows(w, r)
	case "/api/info":
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Cache-Control", "no-store")
		_ = json.NewEncoder(w).Encode(map[string]string{"source": h.label})
	case "/", "/app.js", "/app.css":
		h.static.ServeHTTP(w, r)
	default:
		http.NotFound(w, r)
	}
}

// flows answers as the agents do: NDJSON, one record a line, the newest
// limit records; with follow=true the answer then stays open and each new
// record is flushed as it comes. A follow that fails ends with one line
// {"error": "...", "status": 400 when the agents refused the query}, so
// the page can tell a failure from a quiet network, and a query to fix
// from an agent to wait for.
func (h *Handler) flows(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "application/x-ndjson")
	w.Header().Set("Cache-Control", "no-store")
	q := keep(r.URL.Query())
	enc := json.NewEncoder(w)
	if r.URL.Query().Get("follow") != "true" {
		recs, err := h.src.List(r.Context(), q)
		if err != nil {
			status := http.StatusBadGateway
			if refused(err) != 0 {
				status = http.StatusBadRequest
			}
			w.Header().Set("Content-Type", "text/plain; charset=utf-8")
			http.Error(w, err.Error(), status)
			return
		}
		for _, rec := range recs {
			if enc.Encode(rec) != nil {
				return
			}
		}
		return
	}
	flusher, _ := w.(http.Flusher)
	w.WriteHeader(http.StatusOK)
	if flusher != nil {
		flusher.Flush()
	}
	err := h.src.Follow(r.Context(), q, func(rec flows.Record) error {
		if err := enc.Encode(rec); err != nil {
			return err
		}
		if flusher != nil {
			flusher.Flush()
		}
		return nil
	})
	if err != nil && r.Context().Err() == nil {
		_ = enc.Encode(followError{Error: err.Error(), Status: refused(err)})
	}
}

// followError is a follow stream's last line when it fails.
type followError struct {
	Error  string `json:"error"`
	Status int    `json:"status,omitempty"`
}

// refused is 400 when the agents refused the query, else 0.
func refused(err error) int {
	var ae *AgentError
	if errors.As(err, &ae) && ae.Status == http.StatusBadRequest {
		return http.StatusBadRequest
	}
	return 0
}
