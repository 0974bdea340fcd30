package store_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/lesfarm/lesfarm/coordinator/store"
)

func TestDeviceCredentials(t *testing.T) {
	ctx := context.Background()
	st := open(t)

	for _, bad := range []string{"", "a.b", "dev*", strings.Repeat("x", 65), "dev 1"} {
		if _, _, err := st.CreateDeviceCredential(ctx, bad); err == nil {
			t.Errorf("CreateDeviceCredential(%q): want an error", bad)
		}
	}
	secretA, credA, err := st.CreateDeviceCredential(ctx, "dev-a")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(secretA, store.DeviceSecretPrefix) || len(secretA) != len(store.DeviceSecretPrefix)+52 || !strings.HasPrefix(secretA, credA.Prefix) {
		t.Fatalf("secret %q / prefix %q: want lfd_ + 52 base32 characters starting with the prefix", secretA, credA.Prefix)
	}
	secretB, credB, err := st.CreateDeviceCredential(ctx, "dev-b")
	if err != nil {
		t.Fatal(err)
	}
	if secretA == secretB {
		t.Fatal("two credentials share a secret")
	}

	got, err := st.VerifyDeviceCredential(ctx, secretA)
	if err != nil || got.DeviceID != "dev-a" || got.ID != credA.ID {
		t.Fatalf("VerifyDeviceCredential(A) = %+v, %v; want dev-a id %d", got, err, credA.ID)
	}
	for _, bad := range []string{"", secretA + "x", secretA[:len(secretA)-1] + "a", "lft_" + secretA[4:], strings.Repeat("lfd_", 100)} {
		if bad == secretA {
			continue
		}
		if _, err := st.VerifyDeviceCredential(ctx, bad); !errors.Is(err, store.ErrBadDeviceCredential) {
			t.Errorf("VerifyDeviceCredential(%.12q…) = %v; want ErrBadDeviceCredential", bad, err)
		}
	}

	list, err := st.ListDeviceCredentials(ctx, "")
	if err != nil || len(list) != 2 || list[0].ID != credB.ID || list[1].LastUsedAt == nil {
		t.Fatalf("ListDeviceCredentials = %+v, %v; want B then A (A used)", list, err)
	}
	if list, err := st.ListDeviceCredentials(ctx, "dev-b"); err != nil || len(list) != 1 || list[0].DeviceID != "dev-b" {
		t.Fatalf("ListDeviceCredentials(dev-b) = %+v, %v", list, err)
	}

	rev, err := st.RevokeDeviceCredential(ctx, credA.ID)
	if err != nil || rev.DeviceID != "dev-a" || rev.RevokedAt == nil {
		t.Fatalf("RevokeDeviceCredential = %+v, %v", rev, err)
	}
	if _, err := st.RevokeDeviceCredential(ctx, credA.ID); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("second revoke: %v; want ErrNotFound", err)
	}
	if _, err := st.VerifyDeviceCredential(ctx, secretA); !errors.Is(err, store.ErrBadDeviceCredential) {
		t.Fatalf("revoked credential verifies: %v", err)
	}
	if _, err := st.VerifyDeviceCredential(ctx, secretB); err != nil {
		t.Fatalf("B stopped working after A was revoked: %v", err)
	}
}
