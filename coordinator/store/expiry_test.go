package store_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/lesfarm/lesfarm/coordinator/store"
)

// expire moves a secret's expiry into the past, as if its time had passed
// (by the database's clock, which the check uses).
func expire(t *testing.T, st *store.Store, table string, id int64) {
	t.Helper()
	if _, err := st.Pool().Exec(context.Background(), `UPDATE `+table+` SET expires_at = now() - interval '1 second' WHERE id = $1`, id); err != nil {
		t.Fatal(err)
	}
}

// TestCredentialExpiry: a token or device credential created with an
// expiry works until then and is refused afterwards exactly like a revoked
// one (the same error); one created without expiry never expires.
func TestCredentialExpiry(t *testing.T) {
	ctx := context.Background()
	st := open(t)
	before := time.Now()

	tokSecret, tok, err := st.CreateAPITokenWith(ctx, &store.APITokenParams{Name: "ci", ExpiresIn: 720 * time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	if tok.ExpiresAt == nil || tok.ExpiresAt.Sub(before) < 719*time.Hour || tok.ExpiresAt.Sub(before) > 721*time.Hour {
		t.Fatalf("token expires at %v, want about 720h from now", tok.ExpiresAt)
	}
	plainSecret, plain, err := st.CreateAPIToken(ctx, "forever")
	if err != nil || plain.ExpiresAt != nil {
		t.Fatalf("token without expiry: %+v, %v", plain, err)
	}
	credSecret, cred, err := st.CreateDeviceCredentialWith(ctx, &store.DeviceCredentialParams{DeviceID: "dev-a", ExpiresIn: time.Hour})
	if err != nil || cred.ExpiresAt == nil {
		t.Fatalf("credential with expiry: %+v, %v", cred, err)
	}
	if _, _, err := st.CreateAPITokenWith(ctx, &store.APITokenParams{Name: "x", ExpiresIn: -time.Second}); err == nil {
		t.Fatal("negative expiry accepted")
	}
	if _, _, err := st.CreateDeviceCredentialWith(ctx, &store.DeviceCredentialParams{DeviceID: "dev-a", ExpiresIn: -time.Second}); err == nil {
		t.Fatal("negative credential expiry accepted")
	}

	if _, err := st.VerifyAPIToken(ctx, tokSecret); err != nil {
		t.Fatalf("unexpired token: %v", err)
	}
	if _, err := st.VerifyDeviceCredential(ctx, credSecret); err != nil {
		t.Fatalf("unexpired credential: %v", err)
	}
	expire(t, st, "api_tokens", tok.ID)
	expire(t, st, "device_credentials", cred.ID)
	if _, err := st.VerifyAPIToken(ctx, tokSecret); !errors.Is(err, store.ErrUnauthorized) {
		t.Fatalf("expired token: %v; want ErrUnauthorized (as revoked)", err)
	}
	if _, err := st.VerifyDeviceCredential(ctx, credSecret); !errors.Is(err, store.ErrBadDeviceCredential) {
		t.Fatalf("expired credential: %v; want ErrBadDeviceCredential (as revoked)", err)
	}
	if _, err := st.VerifyAPIToken(ctx, plainSecret); err != nil {
		t.Fatalf("token without expiry: %v", err)
	}
	toks, err := st.ListAPITokens(ctx)
	if err != nil || len(toks) != 2 || toks[1].ExpiresAt == nil || toks[1].ExpiresAt.After(time.Now()) {
		t.Fatalf("ListAPITokens = %+v, %v; want the expired one's expiry shown", toks, err)
	}
	creds, err := st.ListDeviceCredentials(ctx, "dev-a")
	if err != nil || len(creds) != 1 || creds[0].ExpiresAt == nil {
		t.Fatalf("ListDeviceCredentials = %+v, %v", creds, err)
	}
}

// TestLastUsedWrittenOncePerMinute: a storm of concurrent verifications
// records the use once (last_used_at moves once), not once per request.
func TestLastUsedWrittenOncePerMinute(t *testing.T) {
	ctx := context.Background()
	st := open(t)
	secret, tok, err := st.CreateAPIToken(ctx, "storm")
	if err != nil {
		t.Fatal(err)
	}
	// xmin (the row version's transaction) changes on every UPDATE.
	xmin := func() string {
		var x string
		if err := st.Pool().QueryRow(ctx, `SELECT xmin::text FROM api_tokens WHERE id = $1`, tok.ID).Scan(&x); err != nil {
			t.Fatal(err)
		}
		return x
	}
	x0 := xmin()
	if _, err := st.VerifyAPIToken(ctx, secret); err != nil {
		t.Fatal(err)
	}
	x1 := xmin()
	if x1 == x0 {
		t.Fatal("first use not recorded")
	}
	var wg sync.WaitGroup
	for range 50 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := st.VerifyAPIToken(ctx, secret); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	if x2 := xmin(); x2 != x1 {
		t.Fatalf("50 uses within the minute rewrote the row (xmin %s -> %s)", x1, x2)
	}
	toks, _ := st.ListAPITokens(ctx)
	if len(toks) != 1 || toks[0].LastUsedAt == nil {
		t.Fatalf("last use not listed: %+v", toks)
	}
}
