package api

import (
	"net/http"
	"net/url"
	"strconv"

	"github.com/danielgtaylor/huma/v2"
)

// maxFollowedRuns bounds the runs one run-events stream follows (the
// eventsInput.Run maxItems).
const maxFollowedRuns = 1000

// checkEventsQuery refuses, before the stream starts, a run-events
// request that follows too many runs or none: with 20,000 ids the stream
// answered 200 and then an error event (issue 29, finding 12), which a
// client only sees after parsing the stream.
func checkEventsQuery(api huma.API, ctx huma.Context, next func(huma.Context)) {
	q, err := url.ParseQuery(ctx.URL().RawQuery)
	if err != nil {
		huma.WriteErr(api, ctx, http.StatusBadRequest, "malformed query string")
		return
	}
	runs := len(q["run"])
	switch {
	case runs > maxFollowedRuns:
		huma.WriteErr(api, ctx, http.StatusUnprocessableEntity, "validation failed", &huma.ErrorDetail{
			Location: "query.run", Message: "follows " + strconv.Itoa(runs) + " runs, at most " + strconv.Itoa(maxFollowedRuns) + " (follow a trigger instead)", Value: runs})
		return
	case runs == 0 && q.Get("trigger") == "":
		huma.WriteErr(api, ctx, http.StatusUnprocessableEntity, "give trigger or run", &huma.ErrorDetail{
			Location: "query.run", Message: "give trigger or at least one run"})
		return
	}
	next(ctx)
}

// DefaultMaxAnonymousStreams is Deps.MaxAnonymousStreams' default: every
// stream lifts the server's timeouts, so without a bound anyone who can
// reach the API could hold connections (and their goroutines and
// database polls) without limit (issue 29, finding 12). Agents that
// download models without --artifact-token count here too.
const DefaultMaxAnonymousStreams = 512

// anonStream takes a slot for an anonymous stream; when none is free it
// writes 503 with Retry-After and returns false.
func (s *Server) anonStream(ctx huma.Context) (release func(), ok bool) {
	select {
	case s.anonStreams <- struct{}{}:
		return func() { <-s.anonStreams }, true
	default:
		s.metrics.shed.Inc()
		ctx.SetHeader("Retry-After", strconv.Itoa(RetryAfter))
		huma.WriteErr(s.api, ctx, http.StatusServiceUnavailable,
			"too many streams and downloads without an API token are open; retry later, or send 'Authorization: Bearer <token>'")
		return nil, false
	}
}
