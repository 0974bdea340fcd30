package api

import (
	"context"
	"net/http"
	"strconv"
	"time"

	"github.com/danielgtaylor/huma/v2"
	"github.com/danielgtaylor/huma/v2/adapters/humago"
)

// Default request limits (see Deps.RequestTimeout, Deps.MaxInFlight and
// Deps.QueueWait).
const (
	DefaultRequestTimeout = 10 * time.Second
	DefaultMaxInFlight    = 32
	DefaultQueueWait      = 250 * time.Millisecond
)

// longOperation reports whether the request is one that legitimately
// lasts: a stream (progress events, artifact download), an artifact
// upload, or a trigger with wait=true. Those get no request deadline and
// no server read/write timeout, and do not hold a slot of the in-flight
// bound (their database calls are bounded one by one instead).
func longOperation(ctx huma.Context) bool {
	op := ctx.Operation()
	if op == nil {
		return false
	}
	if op.Metadata["stream"] == true || op.Metadata["long"] == true {
		return true
	}
	return op.OperationID == "trigger-runs" && ctx.Query("wait") == "true"
}

// limitMiddleware bounds every ordinary request: at most MaxInFlight run
// at once (a request that cannot get a slot within QueueWait is shed with
// 503 and Retry-After, so a database stall cannot pile up requests without
// bound) and each has RequestTimeout to finish its database work (a
// stalled database gives 503, not a hang). Long operations instead have
// the server's read and write timeouts lifted.
func (s *Server) limitMiddleware(ctx huma.Context, next func(huma.Context)) {
	if longOperation(ctx) {
		clearDeadlines(ctx)
		next(ctx)
		return
	}
	t := time.NewTimer(s.deps.QueueWait)
	select {
	case s.inflight <- struct{}{}:
		t.Stop()
	case <-t.C:
		s.metrics.shed.Inc()
		ctx.SetHeader("Retry-After", strconv.Itoa(RetryAfter))
		huma.WriteErr(s.api, ctx, http.StatusServiceUnavailable, "coordinator overloaded, retry later")
		return
	case <-ctx.Context().Done():
		t.Stop()
		return
	}
	defer func() { <-s.inflight }()
	rctx, cancel := context.WithTimeout(ctx.Context(), s.deps.RequestTimeout)
	defer cancel()
	next(huma.WithContext(ctx, rctx))
}

// clearDeadlines lifts the server's read and write timeouts for this
// request (a stream or an upload may last longer).
func clearDeadlines(ctx huma.Context) {
	defer func() { _ = recover() }() // not a net/http context (tests): nothing to lift
	_, w := humago.Unwrap(ctx)
	rc := http.NewResponseController(w)
	_ = rc.SetReadDeadline(time.Time{})
	_ = rc.SetWriteDeadline(time.Time{})
}
