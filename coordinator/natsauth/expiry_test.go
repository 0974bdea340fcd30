package natsauth_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/lesfarm/lesfarm/coordinator/store"
	"github.com/lesfarm/lesfarm/internal/testenv"
)

// TestExpiredCredentialRefusedLikeRevoked: a device credential past its
// expiry is an authorization refusal at connect (counted, as a revoked
// one), and Revalidate disconnects a device connected with it before.
func TestExpiredCredentialRefusedLikeRevoked(t *testing.T) {
	ctx := context.Background()
	f := start(t, false)
	secret, cred, err := f.st.CreateDeviceCredentialWith(ctx, &store.DeviceCredentialParams{DeviceID: "dev-a", ExpiresIn: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	a, err := connectDevice(t, f, nats.UserInfo("dev-a", secret), inbox("dev-a"))
	if err != nil {
		t.Fatalf("credential before its expiry: %v", err)
	}
	if n := f.auth.Revalidate(ctx, f.ns); n != 0 {
		t.Fatalf("Revalidate before the expiry disconnected %d", n)
	}
	if _, err := f.st.Pool().Exec(ctx, `UPDATE device_credentials SET expires_at = now() - interval '1 second' WHERE id = $1`, cred.ID); err != nil {
		t.Fatal(err)
	}
	if n := f.auth.Revalidate(ctx, f.ns); n != 1 {
		t.Fatalf("Revalidate after the expiry disconnected %d, want 1", n)
	}
	testenv.Eventually(t, 5*time.Second, 10*time.Millisecond, func() error {
		if !a.nc.IsClosed() {
			return errors.New("device with an expired credential still connected")
		}
		return nil
	})
	before := f.auth.Refused()
	if _, err := connectDevice(t, f, nats.UserInfo("dev-a", secret)); !errors.Is(err, nats.ErrAuthorization) {
		t.Fatalf("connect with the expired credential: %v; want an authorization error", err)
	}
	if f.auth.Refused() != before+1 {
		t.Fatal("refusal of the expired credential not counted")
	}
}
