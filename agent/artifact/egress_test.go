package artifact

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
)

func hexSum(b []byte) string {
	h := sha256.Sum256(b)
	return hex.EncodeToString(h[:])
}

// TestGetRefusesHostNotAllowed: with AllowHosts set, a URL on another host
// fails with ErrNotAllowed and no request reaches it (issue 29, finding
// 8: a suite's model.url made devices GET internal addresses); an allowed
// host is fetched.
func TestGetRefusesHostNotAllowed(t *testing.T) {
	t.Parallel()
	data := []byte("model bytes")
	var hits atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		w.Write(data)
	}))
	defer srv.Close()
	u, _ := url.Parse(srv.URL)
	tests := []struct {
		allow []string
		ok    bool
	}{
		{[]string{"farm.lab"}, false},
		{[]string{u.Hostname() + ":1"}, false},
		{[]string{u.Host}, true},
		{[]string{u.Hostname()}, true},
	}
	for _, tc := range tests {
		c, err := New(Config{Dir: t.TempDir(), AllowHosts: tc.allow, Attempts: 1, Logger: slog.New(slog.DiscardHandler)})
		if err != nil {
			t.Fatal(err)
		}
		before := hits.Load()
		h, err := c.Get(context.Background(), Spec{URL: srv.URL + "/m", SHA256: hexSum(data), Size: int64(len(data))}, nil)
		if tc.ok {
			if err != nil {
				t.Fatalf("allow %v: %v", tc.allow, err)
			}
			h.Release()
			continue
		}
		if !errors.Is(err, ErrNotAllowed) || hits.Load() != before {
			t.Fatalf("allow %v: err %v, %d requests made, want ErrNotAllowed and none", tc.allow, err, hits.Load()-before)
		}
	}
}

// TestDownloadErrorDoesNotEchoServer: what a failed download says (shown
// to every reader of the run) carries the status code, never the server's
// reason phrase or body, nor bytes of a malformed response.
func TestDownloadErrorDoesNotEchoServer(t *testing.T) {
	t.Parallel()
	const secret = "internal-admin-panel-v2"
	statusSrv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusTeapot)
		w.Write([]byte(secret))
	}))
	defer statusSrv.Close()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			conn.Write([]byte("SSH-2.0-" + secret + "\r\n"))
			conn.Close()
		}
	}()
	for _, u := range []string{statusSrv.URL + "/m", "http://" + ln.Addr().String() + "/m"} {
		c, err := New(Config{Dir: t.TempDir(), Attempts: 1, Logger: slog.New(slog.DiscardHandler)})
		if err != nil {
			t.Fatal(err)
		}
		_, err = c.Get(context.Background(), Spec{URL: u, SHA256: hexSum([]byte("x")), Size: 1}, nil)
		if err == nil || strings.Contains(err.Error(), secret) || strings.Contains(err.Error(), "teapot") {
			t.Fatalf("GET %s: error %v echoes the server", u, err)
		}
	}
}
