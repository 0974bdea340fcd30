package client

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
)

// Option configures a Client in New.
type Option func(*Client) error

// WithCAFile makes the client trust the CA certificates in the PEM file
// path (e.g. the ca.pem of 'lesfarm tls init') for an https:// server, on
// top of none: the system roots are not used, so only the lab CA's
// certificates pass. An empty path keeps the system roots.
func WithCAFile(path string) Option {
	return func(c *Client) error {
		if path == "" {
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return fmt.Errorf("client: CA file: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(b) {
			return fmt.Errorf("client: CA file %s holds no PEM certificate", path)
		}
		c.http.Transport = &http.Transport{
			Proxy:           http.ProxyFromEnvironment,
			TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12},
			// The default transport's connection reuse and timeouts.
			MaxIdleConns: 16, IdleConnTimeout: http.DefaultTransport.(*http.Transport).IdleConnTimeout,
			TLSHandshakeTimeout: http.DefaultTransport.(*http.Transport).TLSHandshakeTimeout,
			ForceAttemptHTTP2:   true,
		}
		return nil
	}
}

// do sends req and turns the TLS mismatches an operator makes into
// errors that say what to change.
func (c *Client) do(req *http.Request) (*http.Response, error) {
	resp, err := c.http.Do(req)
	if err != nil {
		var ua x509.UnknownAuthorityError
		var hn x509.HostnameError
		var ci x509.CertificateInvalidError
		switch {
		case errors.As(err, &ua):
			return nil, fmt.Errorf("client: %s: the coordinator's TLS certificate is not signed by a CA this client trusts: give the lab CA with --ca FILE or LESFARM_CA (lesfarm tls init wrote it as ca.pem): %w", c.base.Host, err)
		case errors.As(err, &hn):
			return nil, fmt.Errorf("client: %s: the coordinator's TLS certificate is not for this host name: reach it by a name it was issued for, or reissue it with lesfarm tls init --host: %w", c.base.Host, err)
		case errors.As(err, &ci):
			return nil, fmt.Errorf("client: %s: the coordinator's TLS certificate is not valid (expired or not yet valid? reissue with lesfarm tls init): %w", c.base.Host, err)
		case strings.Contains(err.Error(), "server gave HTTP response to HTTPS client"):
			return nil, fmt.Errorf("client: %s speaks plain HTTP, not HTTPS: use http:// (or start lesfarm serve with --tls-cert): %w", c.base.Host, err)
		}
		return nil, err
	}
	if resp.StatusCode == http.StatusBadRequest && c.base.Scheme == "http" && resp.Header.Get("Content-Type") == "" {
		// Go's HTTPS server answers a plaintext request with a bare 400
		// and this body.
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		resp.Body.Close()
		if strings.Contains(string(b), "HTTP request to an HTTPS server") {
			return nil, fmt.Errorf("client: %s speaks HTTPS only: use https://%s (and --ca FILE for a lab CA)", c.base.Host, c.base.Host)
		}
		resp.Body = io.NopCloser(strings.NewReader(string(b)))
	}
	return resp, nil
}
