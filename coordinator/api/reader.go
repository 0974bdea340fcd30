package api

import (
	"context"
	"strings"

	"github.com/danielgtaylor/huma/v2"
)

// Who sees fencing tokens. A run's fencing token is what a device's
// messages for that run must carry; tokens are sequential, so showing
// them to anonymous readers gave a hostile device the last piece of
// another device's message ids (issue 29, finding 1; docs/security.md).
// Reads stay open, but a run's token is shown only to a request with a
// valid API token.

// authed reports whether the request carried a verified API token.
func authed(ctx context.Context) bool { return tokenName(ctx) != "" }

// readerContext returns ctx marked authed when an open read carries a
// valid bearer token; a missing or invalid one leaves it anonymous (the
// read is still served).
func (s *Server) readerContext(ctx huma.Context) huma.Context {
	secret, ok := strings.CutPrefix(ctx.Header("Authorization"), "Bearer ")
	if !ok || strings.TrimSpace(secret) == "" {
		return ctx
	}
	tok, err := s.deps.Store.VerifyAPIToken(ctx.Context(), strings.TrimSpace(secret))
	if err != nil {
		return ctx
	}
	return huma.WithValue(ctx, tokenNameKey{}, tok.Name)
}

// hideTokens clears the runs' fencing tokens unless the request is
// authed.
func hideTokens(ctx context.Context, runs []Run) {
	if authed(ctx) {
		return
	}
	for k := range runs {
		runs[k].Token = 0
	}
}
