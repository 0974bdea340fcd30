package artifact

import (
	"context"
	"crypto/sha256"
	"crypto/tls"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/lesfarm/lesfarm/lib/backoff"
)

// fetch downloads spec into partial/, retrying with backoff and resuming
// from what is already there, then verifies and moves it into objects/.
func (c *Cache) fetch(ctx context.Context, spec Spec, progress Progress) error {
	if err := c.makeRoom(spec.Size, spec.SHA256); err != nil {
		_ = os.Remove(c.partialPath(spec.SHA256))
		return fmt.Errorf("%w: %w", ErrNoSpace, err)
	}
	var lastErr error
	for attempt := 1; attempt <= c.cfg.Attempts; attempt++ {
		if attempt > 1 {
			d := backoff.Delay(attempt-2, c.cfg.RetryBase, time.Minute)
			c.log.Warn("artifact: download failed, retrying", "sha256", spec.SHA256, "attempt", attempt, "delay", d.String(), "err", lastErr)
			select {
			case <-time.After(d):
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		err := c.download(ctx, spec, progress)
		if err == nil {
			return nil
		}
		if errors.Is(err, ErrNoSpace) {
			// The disk is full: retrying cannot help, and the partial
			// file is what fills it.
			_ = os.Remove(c.partialPath(spec.SHA256))
			return err
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		lastErr = err
		var perm *permanentError
		if errors.As(err, &perm) {
			return perm.err
		}
	}
	return fmt.Errorf("artifact: %s: giving up after %d attempts: %w", spec.SHA256, c.cfg.Attempts, lastErr)
}

type permanentError struct{ err error }

func (e *permanentError) Error() string { return e.err.Error() }

// download performs one attempt: it resumes partial/<sha>.part with a Range
// request when the file exists, appends, and on reaching the full size
// verifies the digest. A digest mismatch removes the partial file so the
// next attempt starts from zero.
func (c *Cache) download(ctx context.Context, spec Spec, progress Progress) error {
	part := c.partialPath(spec.SHA256)
	f, err := os.OpenFile(part, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return &permanentError{fmt.Errorf("artifact: %w", err)}
	}
	defer f.Close()
	have, err := f.Seek(0, io.SeekEnd)
	if err != nil {
		return err
	}
	if have > spec.Size {
		c.log.Warn("artifact: partial download longer than the artifact, restarting", "sha256", spec.SHA256, "have", have)
		if err := f.Truncate(0); err != nil {
			return err
		}
		have = 0
		if _, err := f.Seek(0, io.SeekStart); err != nil {
			return err
		}
	}
	// Hash what is already there so verification covers the whole file.
	h := sha256.New()
	if have > 0 {
		if _, err := io.Copy(h, io.NewSectionReader(f, 0, have)); err != nil {
			return err
		}
	}
	if have < spec.Size {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, spec.URL, nil)
		if err != nil {
			return &permanentError{fmt.Errorf("artifact: %w", err)}
		}
		for k, vs := range c.cfg.Header {
			for _, v := range vs {
				req.Header.Add(k, v)
			}
		}
		if have > 0 {
			req.Header.Set("Range", "bytes="+strconv.FormatInt(have, 10)+"-")
		}
		resp, err := c.cfg.Client.Do(req)
		if err != nil {
			c.log.Warn("artifact: request failed", "sha256", spec.SHA256, "url", spec.URL, "err", err)
			return fmt.Errorf("artifact: GET %s: %w", spec.URL, fetchError(err))
		}
		defer resp.Body.Close()
		switch {
		case resp.StatusCode == http.StatusPartialContent && have > 0:
			if start, ok := contentRangeStart(resp.Header.Get("Content-Range")); !ok || start != have {
				return c.restart(f, spec, fmt.Errorf("artifact: server resumed at %q, asked for %d", resp.Header.Get("Content-Range"), have))
			}
			c.log.Info("artifact: resuming download", "sha256", spec.SHA256, "offset", have, "size", spec.Size)
		case resp.StatusCode == http.StatusOK:
			if have > 0 {
				c.log.Info("artifact: server ignored Range, downloading from the start", "sha256", spec.SHA256)
				if err := f.Truncate(0); err != nil {
					return err
				}
				if _, err := f.Seek(0, io.SeekStart); err != nil {
					return err
				}
				have = 0
				h.Reset()
			}
			if resp.ContentLength >= 0 && resp.ContentLength != spec.Size {
				return &permanentError{fmt.Errorf("%w: %s serves %d bytes, spec says %d", ErrVerify, spec.URL, resp.ContentLength, spec.Size)}
			}
		case resp.StatusCode == http.StatusRequestedRangeNotSatisfiable:
			return c.restart(f, spec, fmt.Errorf("artifact: GET %s: range %d- not satisfiable", spec.URL, have))
		case resp.StatusCode == http.StatusNotFound || resp.StatusCode == http.StatusForbidden || resp.StatusCode == http.StatusUnauthorized:
			return &permanentError{fmt.Errorf("artifact: GET %s: HTTP %d", spec.URL, resp.StatusCode)}
		default:
			// The status code only: the reason phrase (and the body) are
			// the remote server's words, and the error is shown to anyone
			// who reads the run (issue 29, finding 8).
			return fmt.Errorf("artifact: GET %s: HTTP %d", spec.URL, resp.StatusCode)
		}
		pw := &progressWriter{c: c, spec: spec, done: have, progress: progress, last: time.Now()}
		body := io.LimitReader(resp.Body, spec.Size-have+1)
		n, copyErr := io.Copy(io.MultiWriter(f, h, pw), body)
		have += n
		if have > spec.Size {
			return c.restart(f, spec, fmt.Errorf("%w: %s sent more than %d bytes", ErrVerify, spec.URL, spec.Size))
		}
		if errors.Is(copyErr, syscall.ENOSPC) {
			return fmt.Errorf("%w: the disk filled up after %d of %d bytes", ErrNoSpace, have, spec.Size)
		}
		if copyErr != nil {
			return fmt.Errorf("artifact: GET %s: after %d of %d bytes: %w", spec.URL, have, spec.Size, copyErr)
		}
		if have < spec.Size {
			return fmt.Errorf("artifact: GET %s: short body, %d of %d bytes", spec.URL, have, spec.Size)
		}
		if progress != nil {
			progress(have, spec.Size)
		}
	}
	if got := hex.EncodeToString(h.Sum(nil)); got != spec.SHA256 {
		return c.restart(f, spec, fmt.Errorf("%w: downloaded %s has sha256 %s, want %s", ErrVerify, spec.URL, got, spec.SHA256))
	}
	if err := f.Sync(); err != nil {
		return err
	}
	info, err := f.Stat()
	if err != nil {
		return err
	}
	obj := c.objectPath(spec.SHA256)
	if err := os.Rename(part, obj); err != nil {
		return &permanentError{fmt.Errorf("artifact: %w", err)}
	}
	c.mu.Lock()
	c.index[spec.SHA256] = &entry{Size: spec.Size, LastUsed: time.Now(), ModTime: info.ModTime()}
	c.saveLocked()
	c.mu.Unlock()
	c.log.Info("artifact: verified and cached", "sha256", spec.SHA256, "size", spec.Size)
	return nil
}

// fetchError is what a failed request says in the run's error, which
// readers of the run see: the kind of failure, never text the remote end
// sent (Go's transport quotes a malformed response's first bytes). The
// agent's log keeps the whole error.
func fetchError(err error) error {
	var ne net.Error
	var ue *tls.CertificateVerificationError
	var re tls.RecordHeaderError
	switch {
	case errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded):
		return err
	case errors.As(err, &ue):
		return errors.New("TLS certificate not trusted (agent --tls-ca)")
	case errors.As(err, &re):
		return errors.New("TLS handshake failed")
	case errors.As(err, &ne) && ne.Timeout():
		return errors.New("timed out")
	case errors.Is(err, syscall.ECONNREFUSED), errors.Is(err, syscall.ECONNRESET), errors.Is(err, syscall.EHOSTUNREACH):
		return errors.New("cannot connect")
	}
	return errors.New("request failed (see the agent's log)")
}

// restart discards the partial file so the next attempt starts from zero.
func (c *Cache) restart(f *os.File, spec Spec, err error) error {
	c.log.Warn("artifact: discarding partial download", "sha256", spec.SHA256, "err", err)
	_ = f.Truncate(0)
	return err
}

func contentRangeStart(v string) (int64, bool) {
	// "bytes START-END/TOTAL"
	rest, ok := strings.CutPrefix(v, "bytes ")
	if !ok {
		return 0, false
	}
	s, _, ok := strings.Cut(rest, "-")
	if !ok {
		return 0, false
	}
	n, err := strconv.ParseInt(s, 10, 64)
	return n, err == nil
}

type progressWriter struct {
	c        *Cache
	spec     Spec
	done     int64
	progress Progress
	last     time.Time
}

func (p *progressWriter) Write(b []byte) (int, error) {
	p.done += int64(len(b))
	if now := time.Now(); now.Sub(p.last) >= p.c.cfg.ProgressEvery {
		p.last = now
		p.c.log.Info("artifact: downloading", "sha256", p.spec.SHA256, "done", p.done, "total", p.spec.Size,
			"percent", fmt.Sprintf("%.1f", 100*float64(p.done)/float64(p.spec.Size)))
		if p.progress != nil {
			p.progress(p.done, p.spec.Size)
		}
	}
	return len(b), nil
}
