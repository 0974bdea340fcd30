// Package artifact keeps model files on the device: it downloads them over
// HTTP with Range resume, verifies their sha256 and size, and keeps them in a
// local cache bounded by a byte cap with least-recently-used eviction.
//
// A file is only ever handed out after its full size and sha256 matched; a
// short or corrupt download is resumed or restarted and never used.
//
// Layout under the cache directory:
//
//	objects/<sha256>        verified files
//	partial/<sha256>.part   downloads in progress (resumed with Range)
//	index.json              sizes, last use and verification stamps
package artifact

import (
	"cmp"
	"context"
	"crypto/sha256"
	"crypto/tls"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/lesfarm/lesfarm/jobs"
)

// Spec names one artifact: where it comes from and what it must be.
type Spec struct {
	// URL is an http(s) URL to download from. Path is a local file used
	// instead of a download (host agents). One of them is required.
	URL  string
	Path string
	// SHA256 is the lowercase hex digest of the content (required).
	SHA256 string
	// Size is the exact size in bytes (required, > 0).
	Size int64
}

// Validate checks the spec and returns a one-line error for the first
// problem.
func (s Spec) Validate() error {
	if s.URL == "" && s.Path == "" {
		return errors.New("artifact: neither url nor path given")
	}
	if s.URL != "" && !strings.HasPrefix(s.URL, "http://") && !strings.HasPrefix(s.URL, "https://") {
		return fmt.Errorf("artifact: url %q is not http(s)", s.URL)
	}
	if len(s.SHA256) != 64 {
		return fmt.Errorf("artifact: sha256 %q is not 64 hex digits", s.SHA256)
	}
	if _, err := hex.DecodeString(s.SHA256); err != nil || strings.ToLower(s.SHA256) != s.SHA256 {
		return fmt.Errorf("artifact: sha256 %q is not lowercase hex", s.SHA256)
	}
	if s.Size <= 0 {
		return fmt.Errorf("artifact: size %d must be positive", s.Size)
	}
	return nil
}

// Progress reports download progress: bytes present and the total.
type Progress func(done, total int64)

// Config configures a Cache. Zero fields take the documented defaults.
type Config struct {
	// Dir is the cache directory (required). It is created if missing.
	Dir string
	// MaxBytes caps the total size of cached objects; 0 means 20 GiB.
	MaxBytes int64
	// Client does the downloads; nil means a client with no overall timeout
	// (ctx bounds a download) and a 30 s response-header timeout.
	Client *http.Client
	// TLS is the client TLS configuration of the default Client (e.g. a
	// lab CA as its only root); ignored when Client is set.
	TLS *tls.Config
	// Header is added to every request (e.g. Authorization).
	Header http.Header
	// AllowHosts, when not empty, are the only hosts a URL is fetched
	// from: entries as jobs.NormalizeEgressHost returns them ("host" any
	// port, "host:port" that port). Any other URL fails with
	// ErrNotAllowed before a request is made (issue 29, finding 8: a suite
	// must not turn devices into a scanner of their network).
	AllowHosts []string
	// Attempts bounds how often one Get tries a download; 0 means 5.
	Attempts int
	// RetryBase is the first retry delay, doubled per attempt with jitter;
	// 0 means 500 ms.
	RetryBase time.Duration
	// ProgressEvery is the minimum interval between progress logs and
	// callbacks; 0 means 2 s.
	ProgressEvery time.Duration
	// Logger receives progress and retry logs; nil means slog.Default().
	Logger *slog.Logger
}

// Cache is a size-capped, verified, LRU cache of artifacts. It is safe for
// concurrent use; concurrent Gets of one digest share a single download.
type Cache struct {
	cfg Config
	log *slog.Logger

	mu       sync.Mutex
	index    map[string]*entry
	inflight map[string]*flight
	pins     map[string]int
}

type entry struct {
	Size     int64     `json:"size"`
	LastUsed time.Time `json:"last_used"`
	// ModTime and VerifiedSize stamp the file as it was when its digest
	// was checked; a file that changed since is hashed again before use.
	ModTime time.Time `json:"mod_time"`
}

type flight struct {
	done chan struct{}
	err  error
}

// ErrTooLarge is returned when an artifact cannot fit under the cache cap.
var ErrTooLarge = errors.New("artifact: larger than the cache cap")

// ErrNotAllowed is wrapped by the error of a Get whose URL's host is not
// in Config.AllowHosts.
var ErrNotAllowed = errors.New("artifact: download host not allowed")

// ErrVerify is wrapped by errors about content that does not match its spec.
var ErrVerify = errors.New("artifact: verification failed")

// New opens (or creates) a cache in cfg.Dir.
func New(cfg Config) (*Cache, error) {
	if cfg.Dir == "" {
		return nil, errors.New("artifact cache config: dir is required")
	}
	cfg.MaxBytes = cmp.Or(cfg.MaxBytes, 20<<30)
	cfg.Attempts = cmp.Or(cfg.Attempts, 5)
	cfg.RetryBase = cmp.Or(cfg.RetryBase, 500*time.Millisecond)
	cfg.ProgressEvery = cmp.Or(cfg.ProgressEvery, 2*time.Second)
	if cfg.Client == nil {
		cfg.Client = &http.Client{Transport: &http.Transport{
			Proxy:                 http.ProxyFromEnvironment,
			TLSClientConfig:       cfg.TLS,
			ResponseHeaderTimeout: 30 * time.Second,
			IdleConnTimeout:       90 * time.Second,
		}}
	}
	c := &Cache{cfg: cfg, log: cmp.Or(cfg.Logger, slog.Default()),
		index: map[string]*entry{}, inflight: map[string]*flight{}, pins: map[string]int{}}
	for _, d := range []string{"objects", "partial"} {
		if err := os.MkdirAll(filepath.Join(cfg.Dir, d), 0o755); err != nil {
			return nil, fmt.Errorf("artifact cache: %w", err)
		}
	}
	c.load()
	return c, nil
}

func (c *Cache) objectPath(sha string) string { return filepath.Join(c.cfg.Dir, "objects", sha) }
func (c *Cache) partialPath(sha string) string {
	return filepath.Join(c.cfg.Dir, "partial", sha+".part")
}

// load reads index.json and reconciles it with the objects on disk: objects
// missing from the index are kept but unverified (zero ModTime), entries
// without a file are forgotten.
func (c *Cache) load() {
	if b, err := os.ReadFile(filepath.Join(c.cfg.Dir, "index.json")); err == nil {
		_ = json.Unmarshal(b, &c.index)
	}
	if c.index == nil {
		c.index = map[string]*entry{}
	}
	seen := map[string]bool{}
	des, _ := os.ReadDir(filepath.Join(c.cfg.Dir, "objects"))
	for _, de := range des {
		info, err := de.Info()
		if err != nil || !info.Mode().IsRegular() {
			continue
		}
		sha := de.Name()
		seen[sha] = true
		if e, ok := c.index[sha]; !ok || e == nil {
			c.index[sha] = &entry{Size: info.Size(), LastUsed: info.ModTime()}
		}
	}
	for sha, e := range c.index {
		if !seen[sha] || e == nil {
			delete(c.index, sha)
		}
	}
}

// saveLocked writes index.json atomically. Errors only cost LRU precision.
func (c *Cache) saveLocked() {
	b, err := json.Marshal(c.index)
	if err != nil {
		return
	}
	tmp := filepath.Join(c.cfg.Dir, "index.json.tmp")
	if err := os.WriteFile(tmp, b, 0o644); err != nil {
		return
	}
	_ = os.Rename(tmp, filepath.Join(c.cfg.Dir, "index.json"))
}

// Handle is a verified artifact pinned in the cache: it is not evicted until
// Release is called.
type Handle struct {
	// Path is the verified file.
	Path string
	// SHA256 and Size are the verified digest and size.
	SHA256 string
	Size   int64
	// Downloaded is true when this Get fetched (part of) the file.
	Downloaded bool

	c    *Cache
	once sync.Once
}

// Release unpins the artifact. It is safe to call more than once.
func (h *Handle) Release() {
	if h == nil || h.c == nil {
		return
	}
	h.once.Do(func() {
		h.c.mu.Lock()
		if h.c.pins[h.SHA256]--; h.c.pins[h.SHA256] <= 0 {
			delete(h.c.pins, h.SHA256)
		}
		h.c.mu.Unlock()
	})
}

// Get returns a verified, pinned copy of the artifact, downloading it when
// it is not cached (or no longer matches its digest). progress may be nil.
// Errors wrap ErrTooLarge, ErrVerify or the last download error.
func (c *Cache) Get(ctx context.Context, spec Spec, progress Progress) (*Handle, error) {
	if err := spec.Validate(); err != nil {
		return nil, err
	}
	if spec.Size > c.cfg.MaxBytes {
		return nil, fmt.Errorf("%w: %d bytes > cap %d", ErrTooLarge, spec.Size, c.cfg.MaxBytes)
	}
	if spec.Path != "" && spec.URL == "" {
		return c.local(ctx, spec)
	}
	if len(c.cfg.AllowHosts) > 0 {
		if err := jobs.CheckEgress(spec.URL, c.cfg.AllowHosts); err != nil {
			return nil, fmt.Errorf("%w: %v; this agent fetches from %s only (agent --artifact-host adds one)", ErrNotAllowed, err, strings.Join(c.cfg.AllowHosts, ", "))
		}
	}
	if err := c.CanHold(spec); err != nil { // room.go: before any byte lands
		// A partial download of what cannot fit only takes space.
		_ = os.Remove(c.partialPath(spec.SHA256))
		return nil, err
	}
	for {
		c.mu.Lock()
		if f, ok := c.inflight[spec.SHA256]; ok {
			c.mu.Unlock()
			select {
			case <-f.done:
			case <-ctx.Done():
				return nil, ctx.Err()
			}
			if f.err != nil {
				return nil, f.err
			}
			continue
		}
		if h, ok := c.hitLocked(spec); ok {
			c.mu.Unlock()
			return h, nil
		}
		f := &flight{done: make(chan struct{})}
		c.inflight[spec.SHA256] = f
		c.mu.Unlock()

		err := c.fetch(ctx, spec, progress)
		c.mu.Lock()
		delete(c.inflight, spec.SHA256)
		f.err = err
		close(f.done)
		if err != nil {
			c.mu.Unlock()
			return nil, err
		}
		h, ok := c.hitLocked(spec)
		c.mu.Unlock()
		if !ok {
			return nil, fmt.Errorf("%w: %s vanished after download", ErrVerify, spec.SHA256)
		}
		h.Downloaded = true
		return h, nil
	}
}

// hitLocked returns a pinned handle when a verified object matches spec. An
// object whose file changed since verification is hashed again (under the
// lock: this is rare and protects against handing out a corrupt file); a
// mismatch deletes it.
func (c *Cache) hitLocked(spec Spec) (*Handle, bool) {
	e, ok := c.index[spec.SHA256]
	if !ok {
		return nil, false
	}
	p := c.objectPath(spec.SHA256)
	info, err := os.Stat(p)
	if err != nil {
		delete(c.index, spec.SHA256)
		c.saveLocked()
		return nil, false
	}
	if info.Size() != spec.Size || !info.ModTime().Equal(e.ModTime) {
		if info.Size() != spec.Size || verifyFile(p, spec) != nil {
			c.log.Warn("artifact: cached file does not match its digest, discarding", "sha256", spec.SHA256, "size", info.Size())
			if c.pins[spec.SHA256] == 0 {
				_ = os.Remove(p)
			}
			delete(c.index, spec.SHA256)
			c.saveLocked()
			return nil, false
		}
		e.ModTime = info.ModTime()
	}
	e.Size = spec.Size
	e.LastUsed = time.Now()
	c.pins[spec.SHA256]++
	c.saveLocked()
	return &Handle{Path: p, SHA256: spec.SHA256, Size: spec.Size, c: c}, true
}

// local verifies a local file; it is used in place, not copied.
func (c *Cache) local(ctx context.Context, spec Spec) (*Handle, error) {
	info, err := os.Stat(spec.Path)
	if err != nil {
		return nil, fmt.Errorf("artifact: %w", err)
	}
	if info.Size() != spec.Size {
		return nil, fmt.Errorf("%w: %s is %d bytes, want %d", ErrVerify, spec.Path, info.Size(), spec.Size)
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if err := verifyFile(spec.Path, spec); err != nil {
		return nil, err
	}
	return &Handle{Path: spec.Path, SHA256: spec.SHA256, Size: spec.Size}, nil
}

func verifyFile(path string, spec Spec) error {
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("artifact: %w", err)
	}
	defer f.Close()
	h := sha256.New()
	n, err := io.Copy(h, f)
	if err != nil {
		return fmt.Errorf("artifact: reading %s: %w", path, err)
	}
	if n != spec.Size {
		return fmt.Errorf("%w: %s is %d bytes, want %d", ErrVerify, path, n, spec.Size)
	}
	if got := hex.EncodeToString(h.Sum(nil)); got != spec.SHA256 {
		return fmt.Errorf("%w: %s has sha256 %s, want %s", ErrVerify, path, got, spec.SHA256)
	}
	return nil
}

// makeRoom evicts least-recently-used, unpinned objects until need more
// bytes fit under the cap. Partial downloads count against the cap too.
func (c *Cache) makeRoom(need int64, sha string) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	var used int64
	type cand struct {
		sha  string
		used time.Time
		size int64
	}
	var cands []cand
	for sha, e := range c.index {
		used += e.Size
		if c.pins[sha] == 0 {
			cands = append(cands, cand{sha, e.LastUsed, e.Size})
		}
	}
	parts, _ := os.ReadDir(filepath.Join(c.cfg.Dir, "partial"))
	for _, de := range parts {
		if de.Name() == sha+".part" {
			continue // the download being made room for is counted in need
		}
		if info, err := de.Info(); err == nil {
			used += info.Size()
		}
	}
	sort.Slice(cands, func(i, j int) bool { return cands[i].used.Before(cands[j].used) })
	for _, cd := range cands {
		if used+need <= c.cfg.MaxBytes {
			break
		}
		if err := os.Remove(c.objectPath(cd.sha)); err != nil && !os.IsNotExist(err) {
			continue
		}
		delete(c.index, cd.sha)
		used -= cd.size
		c.log.Info("artifact: evicted", "sha256", cd.sha, "size", cd.size)
	}
	c.saveLocked()
	if used+need > c.cfg.MaxBytes {
		return fmt.Errorf("%w: need %d bytes, %d in use or pinned, cap %d", ErrTooLarge, need, used, c.cfg.MaxBytes)
	}
	return nil
}

// Usage returns the bytes held by verified objects and their count.
func (c *Cache) Usage() (bytes int64, objects int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, e := range c.index {
		bytes += e.Size
	}
	return bytes, len(c.index)
}

// Has reports whether a verified object with this digest is cached.
func (c *Cache) Has(sha string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	_, ok := c.index[sha]
	return ok
}

// Discard forgets a cached object and removes its file unless a handle
// still pins it (the file then goes when it is next found not to match).
// The next Get fetches the artifact again. Callers use it when a file
// fails a check of their own (a build executable hashed again before it
// runs).
func (c *Cache) Discard(sha string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.pins[sha] == 0 {
		_ = os.Remove(c.objectPath(sha))
	}
	delete(c.index, sha)
	c.saveLocked()
}
