package client

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"time"
)

// retrier is the backoff of a call that rides out a coordinator outage:
// an unreachable coordinator or a 5xx answer is retried, doubling the wait
// from RetryMin to RetryMax (a Retry-After is honoured up to RetryMax), for
// up to outage since the call last worked. A 4xx answer is final.
type retrier struct {
	lo, hi, wait, outage time.Duration
	workedAt             time.Time
}

func (c *Client) newRetrier(outage time.Duration) *retrier {
	lo, hi := cmp.Or(c.RetryMin, 500*time.Millisecond), cmp.Or(c.RetryMax, 5*time.Second)
	return &retrier{lo: lo, hi: hi, wait: lo, outage: outage, workedAt: time.Now()}
}

// worked restarts the outage clock and the backoff.
func (r *retrier) worked() { r.workedAt, r.wait = time.Now(), r.lo }

// again waits before the next attempt after err and reports whether to
// make it; when not, it returns the error to give up with.
func (r *retrier) again(ctx context.Context, err error) (bool, error) {
	var p *Problem
	if errors.As(err, &p) && p.Status < 500 {
		return false, err // the request is wrong, retrying will not help
	}
	if ctx.Err() != nil {
		return false, err
	}
	if time.Since(r.workedAt) > r.outage {
		return false, fmt.Errorf("client: coordinator kept failing for %v: %w", r.outage.Round(time.Millisecond), err)
	}
	d := r.wait
	if p != nil && p.RetryAfter > 0 {
		d = min(p.RetryAfter, r.hi)
	}
	select {
	case <-ctx.Done():
		return false, ctx.Err()
	case <-time.After(d):
	}
	r.wait = min(2*r.wait, r.hi)
	return true, nil
}

// getJSON is doJSON for a GET, retried through an outage of up to
// ReadOutage (no retries when it is zero).
func (c *Client) getJSON(ctx context.Context, path string, q url.Values, out any) error {
	if c.ReadOutage <= 0 {
		return c.doJSON(ctx, http.MethodGet, path, q, nil, out)
	}
	r := c.newRetrier(c.ReadOutage)
	for {
		err := c.doJSON(ctx, http.MethodGet, path, q, nil, out)
		if err == nil {
			return nil
		}
		if ok, err := r.again(ctx, err); !ok {
			return err
		}
	}
}
