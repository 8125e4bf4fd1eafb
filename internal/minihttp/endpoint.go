package minihttp

import (
	"fmt"
	"net"
	"net/url"
	"strings"
)

// Endpoint is a server's base URL, parsed once.
type Endpoint struct {
	Base     string // as given, for messages
	TLS      bool
	HostPort string // host:port to dial
	Host     string // for Host headers' host part and the TLS server name
	// Path is the URL's path without its trailing '/', "" for none:
	// requests' paths are appended to it.
	Path string
}

// ParseEndpoint parses an http:// or https:// URL with a host and an
// optional path; the port defaults to the scheme's.
func ParseEndpoint(raw string) (Endpoint, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return Endpoint{}, fmt.Errorf("endpoint %q: %w", raw, err)
	}
	ep := Endpoint{Base: raw, Host: u.Hostname(), Path: strings.TrimRight(u.EscapedPath(), "/")}
	port := u.Port()
	switch u.Scheme {
	case "http":
		if port == "" {
			port = "80"
		}
	case "https":
		ep.TLS = true
		if port == "" {
			port = "443"
		}
	default:
		return Endpoint{}, fmt.Errorf("endpoint %q: scheme must be http or https", raw)
	}
	if ep.Host == "" || u.RawQuery != "" || u.Fragment != "" || u.User != nil {
		return Endpoint{}, fmt.Errorf("endpoint %q: want scheme://host[:port][/path]", raw)
	}
	ep.HostPort = net.JoinHostPort(ep.Host, port)
	return ep, nil
}
