// Package artifact is the coordinator's content-addressed file store for
// model files and other large inputs of benchmark jobs.
//
// Files live under Dir as sha256/<first two hex digits>/<64 hex digits>.
// A file is written to a temporary name in the same directory tree while
// its digest is computed, fsynced, and renamed into place only when the
// digest (and, when given, the expected digest and size) check out, so a
// reader never sees a partial file and a crashed upload leaves only a
// temporary file that Sweep removes. The metadata (size, name, last use)
// is kept in Postgres by coordinator/store; this package only touches the
// file system.
package artifact

import (
	"cmp"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// DefaultMaxSize is the size cap used when Config.MaxSize is zero: 64 GiB,
// larger than any phone-sized MoE model we benchmark.
const DefaultMaxSize int64 = 64 << 30

// Errors returned by Files methods.
var (
	// ErrTooLarge means the content exceeded the configured size cap.
	ErrTooLarge = errors.New("artifact: content exceeds the size cap")
	// ErrDigestMismatch means the content does not hash to the expected sha256.
	ErrDigestMismatch = errors.New("artifact: content does not match the expected sha256")
	// ErrSizeMismatch means the content length differs from the declared size.
	ErrSizeMismatch = errors.New("artifact: content length does not match the declared size")
	// ErrNotFound means no file with that digest is stored.
	ErrNotFound = errors.New("artifact: not found")
	// ErrBadDigest means a digest string is not 64 lowercase hex digits.
	ErrBadDigest = errors.New("artifact: sha256 must be 64 lowercase hex digits")
	// ErrNoSpace means storing the content would leave the file system
	// with less than Config.MinFree bytes (or the disk filled up).
	ErrNoSpace = errors.New("artifact: not enough free space")
)

// DefaultMinFree is the free space a Put keeps on the store's file system
// when Config.MinFree is zero: the coordinator's database and JetStream
// share the disk, and an upload must not be what fills it (issue 29,
// finding 9).
const DefaultMinFree int64 = 256 << 20

// Config configures Files. The zero value of MaxSize means DefaultMaxSize.
type Config struct {
	// Dir is the root directory; it is created if missing. Required.
	Dir string
	// MaxSize caps the size of one artifact in bytes.
	MaxSize int64
	// MinFree is the free space Put leaves on the file system: an upload
	// that would take it below is refused with ErrNoSpace, before it
	// starts when its size is declared, else as soon as it crosses the
	// line. Zero means DefaultMinFree; negative disables the check.
	MinFree int64
}

// Files is a content-addressed file store rooted at a directory. It is safe
// for concurrent use by several goroutines and several processes sharing
// the directory: writes go through unique temporary files and atomic renames.
type Files struct {
	dir     string
	maxSize int64
	minFree int64
}

// Info describes a stored file.
type Info struct {
	SHA256 string
	Size   int64
	// Created reports whether Put stored new content (false when the digest
	// was already present and the upload was deduplicated).
	Created bool
}

// New returns a Files rooted at cfg.Dir, creating the directory if needed.
func New(cfg Config) (*Files, error) {
	if cfg.Dir == "" {
		return nil, errors.New("artifact config: Dir is required")
	}
	cfg.MaxSize = cmp.Or(cfg.MaxSize, DefaultMaxSize)
	if cfg.MaxSize < 0 {
		return nil, fmt.Errorf("artifact config: MaxSize %d is negative", cfg.MaxSize)
	}
	if err := os.MkdirAll(filepath.Join(cfg.Dir, "sha256"), 0o755); err != nil {
		return nil, fmt.Errorf("artifact: %w", err)
	}
	if err := os.MkdirAll(filepath.Join(cfg.Dir, "tmp"), 0o755); err != nil {
		return nil, fmt.Errorf("artifact: %w", err)
	}
	cfg.MinFree = cmp.Or(cfg.MinFree, DefaultMinFree)
	return &Files{dir: cfg.Dir, maxSize: cfg.MaxSize, minFree: cfg.MinFree}, nil
}

// Free returns the bytes available in the store's file system.
func (f *Files) Free() (int64, error) { return freeSpace(f.dir) }

// roomFor returns ErrNoSpace when n more bytes would leave less than
// MinFree free. An unknown free space (no statfs) is not a refusal.
func (f *Files) roomFor(n int64) error {
	if f.minFree < 0 {
		return nil
	}
	free, err := f.Free()
	if err != nil {
		return nil //nolint:nilerr // unknown free space is not a refusal (see above)
	}
	if free-n < f.minFree {
		return fmt.Errorf("%w: %d bytes free, %d more would leave less than the %d kept free", ErrNoSpace, free, n, f.minFree)
	}
	return nil
}

// spaceCheckEvery is how many written bytes an upload of unknown size
// goes between free-space checks.
const spaceCheckEvery = 64 << 20

// spaceWriter refuses a write once the store's file system is down to
// MinFree, checking every spaceCheckEvery bytes.
type spaceWriter struct {
	f       *Files
	w       io.Writer
	pending int64
}

func (s *spaceWriter) Write(b []byte) (int, error) {
	s.pending += int64(len(b))
	if s.pending >= spaceCheckEvery {
		s.pending = 0
		if err := s.f.roomFor(0); err != nil {
			return 0, err
		}
	}
	return s.w.Write(b)
}

// MaxSize returns the size cap in bytes.
func (f *Files) MaxSize() int64 { return f.maxSize }

// ValidDigest reports whether s is a 64-digit lowercase hex sha256.
func ValidDigest(s string) bool {
	if len(s) != 64 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

// Path returns where the file with the given digest lives (whether or not
// it exists). It returns ErrBadDigest for a malformed digest, so a caller
// can never escape the store directory.
func (f *Files) Path(sha string) (string, error) {
	if !ValidDigest(sha) {
		return "", ErrBadDigest
	}
	return filepath.Join(f.dir, "sha256", sha[:2], sha), nil
}

// PutOptions are optional expectations checked by Put.
type PutOptions struct {
	// SHA256, when set, must equal the content's digest.
	SHA256 string
	// Size, when >= 0, must equal the content length. Use -1 for unknown.
	Size int64
	// Progress, when set, is called with the bytes written so far.
	Progress func(written int64)
}

// Put streams r into the store and returns the content's digest and size.
// It never holds the content in memory. It fails with ErrTooLarge as soon
// as more than MaxSize bytes arrive, with ErrDigestMismatch or
// ErrSizeMismatch when the expectations in opt are not met, with
// ErrNoSpace when the file system would keep less than MinFree (checked
// before anything is written when opt.Size is known, and as the bytes
// arrive otherwise; a full disk is ErrNoSpace too), and leaves no file
// behind on any failure, a reader's error included (a stalled upload cut
// by its deadline).
func (f *Files) Put(r io.Reader, opt PutOptions) (Info, error) {
	if opt.SHA256 != "" && !ValidDigest(opt.SHA256) {
		return Info{}, ErrBadDigest
	}
	if opt.Size > f.maxSize {
		return Info{}, ErrTooLarge
	}
	if err := f.roomFor(max(opt.Size, 0)); err != nil {
		return Info{}, err
	}
	tmp, err := os.CreateTemp(filepath.Join(f.dir, "tmp"), "upload-*")
	if err != nil {
		return Info{}, fmt.Errorf("artifact: %w", err)
	}
	tmpName := tmp.Name()
	ok := false
	defer func() {
		if !ok {
			tmp.Close()
			os.Remove(tmpName)
		}
	}()
	h := sha256.New()
	var w io.Writer = io.MultiWriter(&spaceWriter{f: f, w: tmp}, h)
	if opt.Progress != nil {
		w = &progressWriter{w: w, fn: opt.Progress}
	}
	// Read one byte past the cap so an oversized body is detected without
	// trusting any declared length.
	n, err := io.CopyBuffer(w, io.LimitReader(r, f.maxSize+1), make([]byte, 1<<20))
	if errors.Is(err, ErrNoSpace) {
		return Info{}, err
	}
	if errors.Is(err, syscall.ENOSPC) {
		return Info{}, fmt.Errorf("%w: %w", ErrNoSpace, err)
	}
	if err != nil {
		return Info{}, fmt.Errorf("artifact: reading upload: %w", err)
	}
	if n > f.maxSize {
		return Info{}, ErrTooLarge
	}
	if opt.Size >= 0 && n != opt.Size {
		return Info{}, fmt.Errorf("%w: got %d bytes, declared %d", ErrSizeMismatch, n, opt.Size)
	}
	sum := hex.EncodeToString(h.Sum(nil))
	if opt.SHA256 != "" && sum != opt.SHA256 {
		return Info{}, fmt.Errorf("%w: got %s", ErrDigestMismatch, sum)
	}
	if err := tmp.Sync(); errors.Is(err, syscall.ENOSPC) {
		return Info{}, fmt.Errorf("%w: %w", ErrNoSpace, err)
	} else if err != nil {
		return Info{}, fmt.Errorf("artifact: %w", err)
	}
	if err := tmp.Close(); err != nil {
		return Info{}, fmt.Errorf("artifact: %w", err)
	}
	dst, _ := f.Path(sum)
	if st, err := os.Stat(dst); err == nil && st.Size() == n {
		os.Remove(tmpName)
		ok = true
		return Info{SHA256: sum, Size: n}, nil
	}
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		return Info{}, fmt.Errorf("artifact: %w", err)
	}
	if err := os.Chmod(tmpName, 0o444); err != nil {
		return Info{}, fmt.Errorf("artifact: %w", err)
	}
	if err := os.Rename(tmpName, dst); err != nil {
		return Info{}, fmt.Errorf("artifact: %w", err)
	}
	ok = true
	return Info{SHA256: sum, Size: n, Created: true}, nil
}

// Open opens the stored file with the given digest for reading. The caller
// closes it. It returns ErrNotFound when absent and ErrBadDigest for a
// malformed digest.
func (f *Files) Open(sha string) (*os.File, error) {
	p, err := f.Path(sha)
	if err != nil {
		return nil, err
	}
	fh, err := os.Open(p)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, ErrNotFound
	}
	if err != nil {
		return nil, fmt.Errorf("artifact: %w", err)
	}
	return fh, nil
}

// Stat returns the size of the stored file, or ErrNotFound.
func (f *Files) Stat(sha string) (int64, error) {
	p, err := f.Path(sha)
	if err != nil {
		return 0, err
	}
	st, err := os.Stat(p)
	if errors.Is(err, fs.ErrNotExist) {
		return 0, ErrNotFound
	}
	if err != nil {
		return 0, fmt.Errorf("artifact: %w", err)
	}
	return st.Size(), nil
}

// Remove deletes the stored file with the given digest. Removing an absent
// file is not an error.
func (f *Files) Remove(sha string) error {
	p, err := f.Path(sha)
	if err != nil {
		return err
	}
	if err := os.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("artifact: %w", err)
	}
	return nil
}

// List returns the digests of all stored files, in directory order.
func (f *Files) List() ([]string, error) {
	var out []string
	root := filepath.Join(f.dir, "sha256")
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() && ValidDigest(d.Name()) {
			out = append(out, d.Name())
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("artifact: %w", err)
	}
	return out, nil
}

// Sweep removes temporary files of uploads older than age (abandoned by a
// crash or a cut connection) and returns how many it removed.
func (f *Files) Sweep(age time.Duration) (int, error) {
	dir := filepath.Join(f.dir, "tmp")
	ents, err := os.ReadDir(dir)
	if err != nil {
		return 0, fmt.Errorf("artifact: %w", err)
	}
	n := 0
	cut := time.Now().Add(-age)
	for _, e := range ents {
		if !strings.HasPrefix(e.Name(), "upload-") {
			continue
		}
		info, err := e.Info()
		if err != nil || info.ModTime().After(cut) {
			continue
		}
		if os.Remove(filepath.Join(dir, e.Name())) == nil {
			n++
		}
	}
	return n, nil
}

type progressWriter struct {
	w  io.Writer
	n  int64
	fn func(int64)
}

func (p *progressWriter) Write(b []byte) (int, error) {
	n, err := p.w.Write(b)
	p.n += int64(n)
	p.fn(p.n)
	return n, err
}
