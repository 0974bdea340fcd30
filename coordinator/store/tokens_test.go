package store_test

import (
	"context"
	"errors"
	"slices"
	"testing"

	"github.com/lesfarm/lesfarm/coordinator/store"
)

// TestAPITokenScopesAndNames: a token keeps the scopes it was created
// with (all by default), unknown scopes are refused, and a live token's
// name cannot be given to a second live token (issue 29, finding 12) until
// the first is revoked.
func TestAPITokenScopesAndNames(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := open(t)
	secret, tok, err := st.CreateAPITokenWith(ctx, &store.APITokenParams{Name: "ci", Scopes: []string{"trigger", "builds", "trigger"}})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(tok.Scopes, []string{"builds", "trigger"}) {
		t.Fatalf("created scopes %v, want [builds trigger]", tok.Scopes)
	}
	got, err := st.VerifyAPIToken(ctx, secret)
	if err != nil || !slices.Equal(got.Scopes, []string{"builds", "trigger"}) || got.Has(store.ScopeSuites) {
		t.Fatalf("verified token scopes %v (%v), want [builds trigger]", got.Scopes, err)
	}
	_, all, err := st.CreateAPIToken(ctx, "everything")
	if err != nil || len(all.Scopes) != len(store.AllScopes) {
		t.Fatalf("default scopes %v (%v), want all", all.Scopes, err)
	}
	for _, bad := range [][]string{{"root"}, {}} {
		if _, _, err := st.CreateAPITokenWith(ctx, &store.APITokenParams{Name: "bad", Scopes: bad}); err == nil {
			t.Errorf("scopes %q accepted", bad)
		}
	}
	_, _, err = st.CreateAPITokenWith(ctx, &store.APITokenParams{Name: "ci", Scopes: []string{"read"}})
	if !errors.Is(err, store.ErrTokenNameTaken) || !errors.Is(err, store.ErrConflict) {
		t.Fatalf("second live token named ci: %v, want ErrTokenNameTaken", err)
	}
	if err := st.RevokeAPIToken(ctx, tok.ID); err != nil {
		t.Fatal(err)
	}
	if _, _, err := st.CreateAPITokenWith(ctx, &store.APITokenParams{Name: "ci", Scopes: []string{"read"}}); err != nil {
		t.Fatalf("the name of a revoked token is not free again: %v", err)
	}
}
