package kube

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/podnet/podnet/internal/minihttp"
)

// Kubeconfig is a kubeconfig file in its JSON form (JSON is YAML, so
// kubectl reads it too): the one type podnet parses kubeconfigs with (the
// store, from a file or Options.KubeconfigJSON) and renders them with
// (NewKubeconfig, Marshal: the agent's, for the plugins and the store).
// It holds the fields podnet reads or writes; a field it does not know is
// dropped by a round trip.
type Kubeconfig struct {
	APIVersion     string         `json:"apiVersion,omitempty"`
	Kind           string         `json:"kind,omitempty"`
	Clusters       []NamedCluster `json:"clusters"`
	Users          []NamedUser    `json:"users"`
	Contexts       []NamedContext `json:"contexts"`
	CurrentContext string         `json:"current-context"`
	// Preferences is kept so that a rendered kubeconfig has the field
	// every kubectl writes; podnet reads nothing in it.
	Preferences json.RawMessage `json:"preferences,omitempty"`
}

// NamedCluster is a kubeconfig's cluster entry.
type NamedCluster struct {
	Name    string  `json:"name"`
	Cluster Cluster `json:"cluster"`
}

// Cluster is where the API server is and how to trust it.
type Cluster struct {
	Server string `json:"server"`
	// CA is a file of PEM certificates, relative to the kubeconfig's
	// directory; CAData the PEM itself (base64 in the JSON).
	CA            string `json:"certificate-authority,omitempty"`
	CAData        []byte `json:"certificate-authority-data,omitempty"`
	TLSServerName string `json:"tls-server-name,omitempty"`
	// Insecure is parsed only to be refused with a message.
	Insecure bool `json:"insecure-skip-tls-verify,omitempty"`
}

// NamedUser is a kubeconfig's user entry.
type NamedUser struct {
	Name string `json:"name"`
	User User   `json:"user"`
}

// User is how a kubeconfig's user authenticates. File names are
// relative to the kubeconfig's directory; data fields are base64 in the
// JSON.
type User struct {
	Token          string `json:"token,omitempty"`
	TokenFile      string `json:"tokenFile,omitempty"`
	ClientCert     string `json:"client-certificate,omitempty"`
	ClientCertData []byte `json:"client-certificate-data,omitempty"`
	ClientKey      string `json:"client-key,omitempty"`
	ClientKeyData  []byte `json:"client-key-data,omitempty"`
	// Exec, AuthProvider and Username are parsed only to be refused with
	// a message: the store speaks token and client certificate only (a
	// caller with client-go passes its transport instead, Options.Transport).
	Exec         json.RawMessage `json:"exec,omitempty"`
	AuthProvider json.RawMessage `json:"auth-provider,omitempty"`
	Username     string          `json:"username,omitempty"`
}

// NamedContext is a kubeconfig's context entry.
type NamedContext struct {
	Name    string  `json:"name"`
	Context Context `json:"context"`
}

// Context pairs a cluster and a user, by name.
type Context struct {
	Cluster string `json:"cluster"`
	User    string `json:"user"`
}

// NewKubeconfig returns a kubeconfig of one cluster and one user, both
// and the current context named name.
func NewKubeconfig(name string, cluster Cluster, user User) *Kubeconfig {
	return &Kubeconfig{
		APIVersion: "v1", Kind: "Config", CurrentContext: name,
		Clusters:    []NamedCluster{{Name: name, Cluster: cluster}},
		Users:       []NamedUser{{Name: name, User: user}},
		Contexts:    []NamedContext{{Name: name, Context: Context{Cluster: name, User: name}}},
		Preferences: json.RawMessage("{}"),
	}
}

// ParseKubeconfig decodes a kubeconfig in JSON (kubectl config view
// --flatten -o json writes one). YAML is refused, so that a plugin links
// no YAML parser.
func ParseKubeconfig(data []byte) (*Kubeconfig, error) {
	if t := bytes.TrimSpace(data); len(t) == 0 || t[0] != '{' {
		return nil, errors.New("not JSON: podnet reads kubeconfigs in JSON (kubectl config view --flatten -o json), so that a plugin links no YAML parser")
	}
	kc := new(Kubeconfig)
	if err := json.Unmarshal(data, kc); err != nil {
		return nil, err
	}
	return kc, nil
}

// Marshal renders kc as indented JSON.
func (kc *Kubeconfig) Marshal() ([]byte, error) {
	return json.MarshalIndent(kc, "", "  ")
}

// conn is what a kubeconfig says about reaching the API server.
type conn struct {
	server    minihttp.Endpoint
	tls       *tls.Config
	token     string
	tokenFile string // re-read on 401
}

// loadKubeconfig reads path, a kubeconfig in JSON (the agent writes it
// so; kubectl reads JSON too). Relative file names in it are relative to
// its directory, as for kubectl.
func loadKubeconfig(path string) (*conn, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("kubernetes store: %w", err)
	}
	c, err := parseKubeconfig(data, filepath.Dir(path))
	if err != nil {
		return nil, fmt.Errorf("kubernetes store: kubeconfig %s: %w", path, err)
	}
	return c, nil
}

func parseKubeconfig(data []byte, dir string) (*conn, error) {
	kc, err := ParseKubeconfig(data)
	if err != nil {
		return nil, err
	}
	ci, ui, err := kc.Current()
	if err != nil {
		return nil, err
	}
	c := &conn{}
	if c.server, err = minihttp.ParseEndpoint(ci.Server); err != nil {
		return nil, fmt.Errorf("cluster server: %w", err)
	}
	if c.tls, err = ci.tlsConfig(dir); err != nil {
		return nil, err
	}
	if err := ui.apply(c, dir); err != nil {
		return nil, err
	}
	return c, nil
}

// Current returns the current context's cluster and user; without a
// current context, the only context's.
func (kc *Kubeconfig) Current() (Cluster, User, error) {
	name := kc.CurrentContext
	if name == "" && len(kc.Contexts) == 1 {
		name = kc.Contexts[0].Name
	}
	var ci Cluster
	var ui User
	for _, ctx := range kc.Contexts {
		if ctx.Name != name {
			continue
		}
		cf, uf := false, false
		for _, c := range kc.Clusters {
			if c.Name == ctx.Context.Cluster {
				ci, cf = c.Cluster, true
			}
		}
		for _, u := range kc.Users {
			if u.Name == ctx.Context.User {
				ui, uf = u.User, true
			}
		}
		if !cf {
			return ci, ui, fmt.Errorf("context %q: no cluster %q", name, ctx.Context.Cluster)
		}
		if !uf && ctx.Context.User != "" {
			return ci, ui, fmt.Errorf("context %q: no user %q", name, ctx.Context.User)
		}
		return ci, ui, nil
	}
	if name == "" {
		return ci, ui, errors.New("no current-context, and not exactly one context")
	}
	return ci, ui, fmt.Errorf("current-context %q: no such context", name)
}

func (ci Cluster) tlsConfig(dir string) (*tls.Config, error) {
	if ci.Insecure {
		return nil, errors.New("insecure-skip-tls-verify: not supported; give certificate-authority(-data)")
	}
	cfg := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: ci.TLSServerName}
	pem := ci.CAData
	if len(pem) == 0 && ci.CA != "" {
		var err error
		if pem, err = os.ReadFile(abs(dir, ci.CA)); err != nil {
			return nil, fmt.Errorf("certificate-authority: %w", err)
		}
	}
	if len(pem) > 0 {
		cfg.RootCAs = x509.NewCertPool()
		if !cfg.RootCAs.AppendCertsFromPEM(pem) {
			return nil, errors.New("certificate-authority: no PEM certificate in it")
		}
	}
	return cfg, nil
}

func (ui User) apply(c *conn, dir string) error {
	switch {
	case len(ui.Exec) > 0 && string(ui.Exec) != "null":
		return errors.New("user exec credentials: not supported; give token, tokenFile or a client certificate")
	case len(ui.AuthProvider) > 0 && string(ui.AuthProvider) != "null":
		return errors.New("user auth-provider: not supported; give token, tokenFile or a client certificate")
	case ui.Username != "":
		return errors.New("user username/password: not supported; give token, tokenFile or a client certificate")
	}
	c.token = strings.TrimSpace(ui.Token)
	if ui.TokenFile != "" {
		c.tokenFile = abs(dir, ui.TokenFile)
		if c.token == "" {
			tok, err := readToken(c.tokenFile)
			if err != nil {
				return err
			}
			c.token = tok
		}
	}
	cert, key := ui.ClientCertData, ui.ClientKeyData
	var err error
	if len(cert) == 0 && ui.ClientCert != "" {
		if cert, err = os.ReadFile(abs(dir, ui.ClientCert)); err != nil {
			return fmt.Errorf("client-certificate: %w", err)
		}
	}
	if len(key) == 0 && ui.ClientKey != "" {
		if key, err = os.ReadFile(abs(dir, ui.ClientKey)); err != nil {
			return fmt.Errorf("client-key: %w", err)
		}
	}
	if len(cert) == 0 && len(key) == 0 {
		return nil
	}
	pair, err := tls.X509KeyPair(cert, key)
	if err != nil {
		return fmt.Errorf("client certificate and key: %w", err)
	}
	c.tls.Certificates = []tls.Certificate{pair}
	return nil
}

func readToken(path string) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("tokenFile: %w", err)
	}
	tok := strings.TrimSpace(string(b))
	if tok == "" {
		return "", fmt.Errorf("tokenFile %s: empty", path)
	}
	return tok, nil
}

func abs(dir, p string) string {
	if filepath.IsAbs(p) {
		return p
	}
	return filepath.Join(dir, p)
}
