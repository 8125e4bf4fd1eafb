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

// kubeconfig is the part of a kubeconfig file the store reads.
type kubeconfig struct {
	CurrentContext string `json:"current-context"`
	Contexts       []struct {
		Name    string `json:"name"`
		Context struct {
			Cluster string `json:"cluster"`
			User    string `json:"user"`
		} `json:"context"`
	} `json:"contexts"`
	Clusters []struct {
		Name    string      `json:"name"`
		Cluster clusterInfo `json:"cluster"`
	} `json:"clusters"`
	Users []struct {
		Name string   `json:"name"`
		User userInfo `json:"user"`
	} `json:"users"`
}

type clusterInfo struct {
	Server        string `json:"server"`
	CA            string `json:"certificate-authority"`
	CAData        []byte `json:"certificate-authority-data"`
	TLSServerName string `json:"tls-server-name"`
	Insecure      bool   `json:"insecure-skip-tls-verify"`
}

type userInfo struct {
	Token          string          `json:"token"`
	TokenFile      string          `json:"tokenFile"`
	ClientCert     string          `json:"client-certificate"`
	ClientCertData []byte          `json:"client-certificate-data"`
	ClientKey      string          `json:"client-key"`
	ClientKeyData  []byte          `json:"client-key-data"`
	Exec           json.RawMessage `json:"exec"`
	AuthProvider   json.RawMessage `json:"auth-provider"`
	Username       string          `json:"username"`
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
	if t := bytes.TrimSpace(data); len(t) == 0 || t[0] != '{' {
		return nil, errors.New("not JSON: the plugin reads kubeconfigs in JSON (kubectl config view --flatten -o json), so that it links no YAML parser")
	}
	var kc kubeconfig
	if err := json.Unmarshal(data, &kc); err != nil {
		return nil, err
	}
	ci, ui, err := kc.pick()
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

// pick returns the current context's cluster and user; without a
// current context, the only context.
func (kc *kubeconfig) pick() (clusterInfo, userInfo, error) {
	name := kc.CurrentContext
	if name == "" && len(kc.Contexts) == 1 {
		name = kc.Contexts[0].Name
	}
	var ci clusterInfo
	var ui userInfo
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

func (ci clusterInfo) tlsConfig(dir string) (*tls.Config, error) {
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

func (ui userInfo) apply(c *conn, dir string) error {
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
