package api

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/lesfarm/lesfarm/coordinator/store"
)

// TestExpiredTokenRefusedLikeRevoked: a token past its expiry gets the
// same 401 problem+json (status, title, detail, WWW-Authenticate) as a
// revoked one, on mutations and on reads that need a token.
func TestExpiredTokenRefusedLikeRevoked(t *testing.T) {
	t.Parallel()
	e := newEnv(t, func(d *Deps) { d.RequireAuthForReads = true })
	ctx := context.Background()
	expiring, tok, err := e.st.CreateAPITokenWith(ctx, &store.APITokenParams{Name: "expiring", ExpiresIn: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	revoked, rtok, err := e.st.CreateAPIToken(ctx, "revoked")
	if err != nil {
		t.Fatal(err)
	}
	if resp := e.api.Get("/v1/schedules", "Authorization: Bearer "+expiring); resp.Code != http.StatusOK {
		t.Fatalf("token before its expiry: %d %s", resp.Code, resp.Body)
	}
	if _, err := e.st.Pool().Exec(ctx, `UPDATE api_tokens SET expires_at = now() - interval '1 second' WHERE id = $1`, tok.ID); err != nil {
		t.Fatal(err)
	}
	if err := e.st.RevokeAPIToken(ctx, rtok.ID); err != nil {
		t.Fatal(err)
	}
	type answer struct {
		code          int
		title, detail string
		wwwAuth       string
	}
	ask := func(secret string, mutate bool) answer {
		resp := e.api.Get("/v1/schedules", "Authorization: Bearer "+secret)
		if mutate {
			resp = e.api.Delete("/v1/schedules/1", "Authorization: Bearer "+secret)
		}
		p := decodeProblem(t, resp.Header().Get("Content-Type"), resp.Body.Bytes())
		return answer{resp.Code, p.Title, p.Detail, resp.Header().Get("WWW-Authenticate")}
	}
	for _, mutate := range []bool{false, true} {
		exp, rev := ask(expiring, mutate), ask(revoked, mutate)
		if exp.code != http.StatusUnauthorized || exp != rev {
			t.Errorf("mutate=%v: expired token answered %+v, revoked %+v; want the same 401", mutate, exp, rev)
		}
	}
}
