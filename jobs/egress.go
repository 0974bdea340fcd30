package jobs

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"slices"
	"strings"
)

// Egress: where devices may fetch from (issue 29, finding 8). A suite's
// model.url makes every device that runs it issue a GET from inside the
// device network, so an unrestricted URL is a blind SSRF and port-scan
// oracle for whoever may edit suites. The coordinator accepts a model.url
// only on its own artifact URL's host or a host on the admin-set
// allow-list, and agents check again before fetching.

// NormalizeEgressHost checks one allow-list entry, "host" (any port) or
// "host:port" (that port only; an IPv6 address in brackets), and returns
// it lowercased.
func NormalizeEgressHost(entry string) (string, error) {
	e := strings.ToLower(strings.TrimSpace(entry))
	if e == "" || len(e) > 255 || strings.ContainsAny(e, "/@?# \t") {
		return "", fmt.Errorf("egress host %q: want HOST or HOST:PORT (no scheme, path or user)", clip(entry))
	}
	host, port := e, ""
	if strings.HasPrefix(e, "[") || strings.Count(e, ":") == 1 {
		h, p, err := net.SplitHostPort(e)
		if err != nil {
			return "", fmt.Errorf("egress host %q: %v", clip(entry), err)
		}
		if p == "" {
			return "", fmt.Errorf("egress host %q: empty port", clip(entry))
		}
		host, port = h, p
	}
	if host == "" {
		return "", fmt.Errorf("egress host %q: empty host", clip(entry))
	}
	if port != "" {
		if !validPort(port) {
			return "", fmt.Errorf("egress host %q: port %q is not 1-65535", clip(entry), port)
		}
		return net.JoinHostPort(host, port), nil
	}
	if strings.Contains(host, ":") {
		return "[" + host + "]", nil // a bare IPv6 address
	}
	return host, nil
}

func validPort(p string) bool {
	if p == "" || len(p) > 5 || p[0] == '0' {
		return false
	}
	n := 0
	for _, c := range p {
		if c < '0' || c > '9' {
			return false
		}
		n = n*10 + int(c-'0')
	}
	return n >= 1 && n <= 65535
}

// ErrEgressDenied is wrapped by CheckEgress's refusals.
var ErrEgressDenied = errors.New("egress not allowed")

// CheckEgress returns nil when rawURL is an http(s) URL whose host is
// allowed: its host:port (the scheme's default port when none is given)
// equals an entry of allowed with a port, or its host equals one without.
// Entries are as NormalizeEgressHost returns them (callers normalise
// once). A URL with user information is refused: it would carry a secret
// of someone else's to wherever the host resolves.
func CheckEgress(rawURL string, allowed []string) error {
	u, err := url.Parse(rawURL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fmt.Errorf("%w: %q is not an http(s) URL", ErrEgressDenied, clip(rawURL))
	}
	if u.User != nil {
		return fmt.Errorf("%w: %q carries user information", ErrEgressDenied, clip(rawURL))
	}
	host := strings.ToLower(u.Hostname())
	port := u.Port()
	if port == "" {
		port = map[string]string{"http": "80", "https": "443"}[u.Scheme]
	}
	bare := host
	if strings.Contains(host, ":") {
		bare = "[" + host + "]"
	}
	withPort := net.JoinHostPort(host, port)
	if slices.Contains(allowed, bare) || slices.Contains(allowed, withPort) {
		return nil
	}
	return fmt.Errorf("%w: host %s of model.url is neither the coordinator's artifact host nor on the egress allow-list (an admin adds it with 'PUT /v1/egress')", ErrEgressDenied, withPort)
}

// EgressOrigin returns the allow-list entry (host:port) of a base URL such
// as the coordinator's --artifact-url, or "" when it has none.
func EgressOrigin(baseURL string) string {
	u, err := url.Parse(baseURL)
	if err != nil || u.Host == "" {
		return ""
	}
	port := u.Port()
	if port == "" {
		port = map[string]string{"http": "80", "https": "443"}[u.Scheme]
	}
	if port == "" {
		return ""
	}
	return net.JoinHostPort(strings.ToLower(u.Hostname()), port)
}
