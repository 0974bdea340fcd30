package artifact

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

func blob(n int, seed uint64) ([]byte, string) {
	r := rand.New(rand.NewPCG(seed, seed))
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	s := sha256.Sum256(b)
	return b, hex.EncodeToString(s[:])
}

// server serves content with Range support. hook may alter a request's
// handling: it returns true when it wrote the response itself.
type server struct {
	*httptest.Server
	mu       sync.Mutex
	content  []byte
	requests []string // Range header of each request ("" for none)
	hook     func(n int, w http.ResponseWriter, r *http.Request) bool
}

func newServer(t *testing.T, content []byte) *server {
	s := &server{content: content}
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		s.requests = append(s.requests, r.Header.Get("Range"))
		n := len(s.requests)
		hook, content := s.hook, s.content
		s.mu.Unlock()
		if hook != nil && hook(n, w, r) {
			return
		}
		http.ServeContent(w, r, "model.gguf", time.Unix(0, 0), bytes.NewReader(content))
	}))
	t.Cleanup(s.Close)
	return s
}

func (s *server) ranges() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.requests...)
}

func newCache(t *testing.T, dir string, max int64) *Cache {
	t.Helper()
	c, err := New(Config{Dir: dir, MaxBytes: max, RetryBase: time.Millisecond, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func readAll(t *testing.T, p string) []byte {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestDownloadVerifyAndHit(t *testing.T) {
	content, sum := blob(300_000, 1)
	srv := newServer(t, content)
	c := newCache(t, t.TempDir(), 1<<30)
	var last atomic.Int64
	h, err := c.Get(context.Background(), Spec{URL: srv.URL + "/a", SHA256: sum, Size: int64(len(content))}, func(done, total int64) { last.Store(done) })
	if err != nil {
		t.Fatal(err)
	}
	if !h.Downloaded || !bytes.Equal(readAll(t, h.Path), content) || last.Load() != int64(len(content)) {
		t.Fatalf("downloaded=%v progress=%d", h.Downloaded, last.Load())
	}
	h.Release()
	h2, err := c.Get(context.Background(), Spec{URL: srv.URL + "/a", SHA256: sum, Size: int64(len(content))}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer h2.Release()
	if h2.Downloaded || len(srv.ranges()) != 1 {
		t.Fatalf("second Get downloaded again: requests %q", srv.ranges())
	}
}

func TestResumesPartialDownload(t *testing.T) {
	content, sum := blob(1<<20, 2)
	srv := newServer(t, content)
	cut := 400_000
	srv.hook = func(n int, w http.ResponseWriter, r *http.Request) bool {
		if n != 1 {
			return false
		}
		// Promise the whole body, send part of it, drop the connection.
		w.Header().Set("Content-Length", fmt.Sprint(len(content)))
		w.WriteHeader(http.StatusOK)
		w.Write(content[:cut])
		w.(http.Flusher).Flush()
		panic(http.ErrAbortHandler)
	}
	c := newCache(t, t.TempDir(), 1<<30)
	h, err := c.Get(context.Background(), Spec{URL: srv.URL, SHA256: sum, Size: int64(len(content))}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Release()
	if !bytes.Equal(readAll(t, h.Path), content) {
		t.Fatal("resumed file differs from the original")
	}
	rs := srv.ranges()
	if len(rs) != 2 || rs[0] != "" || rs[1] != fmt.Sprintf("bytes=%d-", cut) {
		t.Fatalf("requests = %q, want a full GET then a Range resume at %d", rs, cut)
	}
}

func TestResumesAcrossRestart(t *testing.T) {
	content, sum := blob(200_000, 3)
	srv := newServer(t, content)
	dir := t.TempDir()
	// A previous agent process left half the file behind.
	c := newCache(t, dir, 1<<30)
	if err := os.WriteFile(c.partialPath(sum), content[:123_456], 0o644); err != nil {
		t.Fatal(err)
	}
	c = newCache(t, dir, 1<<30)
	h, err := c.Get(context.Background(), Spec{URL: srv.URL, SHA256: sum, Size: int64(len(content))}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Release()
	if rs := srv.ranges(); len(rs) != 1 || rs[0] != "bytes=123456-" {
		t.Fatalf("requests = %q", rs)
	}
	if !bytes.Equal(readAll(t, h.Path), content) {
		t.Fatal("content differs")
	}
}

func TestRejectsCorruptDownload(t *testing.T) {
	content, sum := blob(100_000, 4)
	bad := bytes.Clone(content)
	bad[5000] ^= 0xff
	srv := newServer(t, bad)
	dir := t.TempDir()
	c := newCache(t, dir, 1<<30)
	_, err := c.Get(context.Background(), Spec{URL: srv.URL, SHA256: sum, Size: int64(len(content))}, nil)
	if !errors.Is(err, ErrVerify) {
		t.Fatalf("err = %v, want ErrVerify", err)
	}
	if n := len(srv.ranges()); n != c.cfg.Attempts {
		t.Errorf("%d requests, want %d retries", n, c.cfg.Attempts)
	}
	if c.Has(sum) {
		t.Fatal("corrupt download was cached")
	}
	if _, err := os.Stat(c.objectPath(sum)); !os.IsNotExist(err) {
		t.Fatal("corrupt file present in objects/")
	}
	// Once the server is fixed, the retry starts from zero and succeeds.
	srv.mu.Lock()
	srv.content = content
	srv.mu.Unlock()
	h, err := c.Get(context.Background(), Spec{URL: srv.URL, SHA256: sum, Size: int64(len(content))}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Release()
	if !bytes.Equal(readAll(t, h.Path), content) {
		t.Fatal("content differs")
	}
}

func TestCorruptDownloadIsRetriedFromZero(t *testing.T) {
	content, sum := blob(100_000, 5)
	bad := bytes.Clone(content)
	bad[99_999] ^= 1
	srv := newServer(t, content)
	srv.hook = func(n int, w http.ResponseWriter, r *http.Request) bool {
		if n == 1 { // first attempt: right size, wrong bytes
			http.ServeContent(w, r, "m", time.Unix(0, 0), bytes.NewReader(bad))
			return true
		}
		return false
	}
	c := newCache(t, t.TempDir(), 1<<30)
	h, err := c.Get(context.Background(), Spec{URL: srv.URL, SHA256: sum, Size: int64(len(content))}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Release()
	if rs := srv.ranges(); len(rs) != 2 || rs[1] != "" {
		t.Fatalf("requests = %q, want the retry to start from zero", rs)
	}
	if !bytes.Equal(readAll(t, h.Path), content) {
		t.Fatal("content differs")
	}
}

func TestCachedFileCorruptedOnDiskIsRefetched(t *testing.T) {
	content, sum := blob(50_000, 6)
	srv := newServer(t, content)
	c := newCache(t, t.TempDir(), 1<<30)
	spec := Spec{URL: srv.URL, SHA256: sum, Size: int64(len(content))}
	h, err := c.Get(context.Background(), spec, nil)
	if err != nil {
		t.Fatal(err)
	}
	h.Release()
	// Flip a byte in place (same size, new mtime: set explicitly, since a
	// coarse file system clock may give the write the old one).
	info, err := os.Stat(h.Path)
	if err != nil {
		t.Fatal(err)
	}
	f, err := os.OpenFile(h.Path, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.WriteAt([]byte{content[10] ^ 0xff}, 10)
	f.Close()
	if err := os.Chtimes(h.Path, time.Time{}, info.ModTime().Add(time.Second)); err != nil {
		t.Fatal(err)
	}
	h2, err := c.Get(context.Background(), spec, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer h2.Release()
	if !h2.Downloaded || !bytes.Equal(readAll(t, h2.Path), content) {
		t.Fatal("corrupted cached file was used")
	}
}

func TestLRUEvictionAndPins(t *testing.T) {
	var specs []Spec
	mux := http.NewServeMux()
	for i := range 3 {
		content, sum := blob(40_000, uint64(10+i))
		mux.HandleFunc(fmt.Sprintf("/%d", i), func(w http.ResponseWriter, r *http.Request) {
			http.ServeContent(w, r, "m", time.Unix(0, 0), bytes.NewReader(content))
		})
		specs = append(specs, Spec{SHA256: sum, Size: int64(len(content))})
	}
	srv := httptest.NewServer(mux)
	defer srv.Close()
	for i := range specs {
		specs[i].URL = fmt.Sprintf("%s/%d", srv.URL, i)
	}
	c := newCache(t, t.TempDir(), 100_000) // room for two
	get := func(i int) *Handle {
		t.Helper()
		h, err := c.Get(context.Background(), specs[i], nil)
		if err != nil {
			t.Fatalf("get %d: %v", i, err)
		}
		return h
	}
	// Each use stamps the entry with the monotonic clock, so uses in
	// sequence are ordered.
	get(0).Release()
	get(1).Release()
	get(0).Release() // 0 is now more recent than 1
	get(2).Release() // evicts 1, the least recently used
	if !c.Has(specs[0].SHA256) || c.Has(specs[1].SHA256) || !c.Has(specs[2].SHA256) {
		t.Fatalf("after eviction: has0=%v has1=%v has2=%v", c.Has(specs[0].SHA256), c.Has(specs[1].SHA256), c.Has(specs[2].SHA256))
	}
	if used, n := c.Usage(); used > 100_000 || n != 2 {
		t.Fatalf("usage %d bytes in %d objects", used, n)
	}
	// Pinned objects are not evicted: with 0 and 2 pinned, 1 cannot fit.
	h0, h2 := get(0), get(2)
	if _, err := c.Get(context.Background(), specs[1], nil); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("err = %v, want ErrTooLarge while both others are pinned", err)
	}
	h0.Release()
	h2.Release()
	get(1).Release()
	// Bigger than the cap: refused without a request.
	if _, err := c.Get(context.Background(), Spec{URL: srv.URL + "/0", SHA256: specs[0].SHA256, Size: 200_000}, nil); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("err = %v", err)
	}
}

func TestSpecValidation(t *testing.T) {
	good := strings.Repeat("a", 64)
	for _, tc := range []struct {
		spec Spec
		want string
	}{
		{Spec{SHA256: good, Size: 1}, "neither url nor path"},
		{Spec{URL: "ftp://x", SHA256: good, Size: 1}, "not http"},
		{Spec{URL: "http://x", SHA256: "abc", Size: 1}, "64 hex"},
		{Spec{URL: "http://x", SHA256: strings.Repeat("A", 64), Size: 1}, "lowercase"},
		{Spec{URL: "http://x", SHA256: good}, "size 0"},
	} {
		if err := tc.spec.Validate(); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: err = %v, want %q", tc.spec, err, tc.want)
		}
	}
}

func TestLocalPath(t *testing.T) {
	content, sum := blob(1000, 7)
	p := t.TempDir() + "/m.gguf"
	os.WriteFile(p, content, 0o644)
	c := newCache(t, t.TempDir(), 1<<20)
	h, err := c.Get(context.Background(), Spec{Path: p, SHA256: sum, Size: 1000}, nil)
	if err != nil || h.Path != p {
		t.Fatalf("h=%v err=%v", h, err)
	}
	bad := strings.Repeat("0", 64)
	if _, err := c.Get(context.Background(), Spec{Path: p, SHA256: bad, Size: 1000}, nil); !errors.Is(err, ErrVerify) {
		t.Fatalf("err = %v", err)
	}
}

func TestConcurrentGetsShareOneDownload(t *testing.T) {
	content, sum := blob(500_000, 8)
	srv := newServer(t, content)
	c := newCache(t, t.TempDir(), 1<<30)
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			h, err := c.Get(context.Background(), Spec{URL: srv.URL, SHA256: sum, Size: int64(len(content))}, nil)
			if err != nil {
				t.Error(err)
				return
			}
			h.Release()
		})
	}
	wg.Wait()
	if n := len(srv.ranges()); n != 1 {
		t.Fatalf("%d downloads, want 1", n)
	}
}
