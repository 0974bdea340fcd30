package artifact

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// TestDownloadOverTLS: with Config.TLS trusting the server's CA an
// https:// model downloads; without it the download fails on the
// certificate (after the configured attempts), never in plaintext.
func TestDownloadOverTLS(t *testing.T) {
	content, sum := blob(50_000, 7)
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.ServeContent(w, r, "model.gguf", time.Unix(0, 0), bytes.NewReader(content))
	}))
	t.Cleanup(srv.Close)
	pool := x509.NewCertPool()
	pool.AddCert(srv.Certificate())
	spec := Spec{URL: srv.URL + "/m", SHA256: sum, Size: int64(len(content))}

	c, err := New(Config{Dir: t.TempDir(), RetryBase: time.Millisecond, Attempts: 2, TLS: &tls.Config{RootCAs: pool}, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	h, err := c.Get(context.Background(), spec, nil)
	if err != nil {
		t.Fatalf("download with the CA: %v", err)
	}
	if !bytes.Equal(readAll(t, h.Path), content) {
		t.Fatal("content differs")
	}
	h.Release()

	untrusting, err := New(Config{Dir: t.TempDir(), RetryBase: time.Millisecond, Attempts: 2, TLS: &tls.Config{RootCAs: x509.NewCertPool()}, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := untrusting.Get(context.Background(), spec, nil); err == nil || !strings.Contains(err.Error(), "certificate") {
		t.Fatalf("download without the CA: %v; want a certificate error", err)
	}
}
