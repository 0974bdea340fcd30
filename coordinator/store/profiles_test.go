package store_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/lesfarm/lesfarm/coordinator/store"
)

// TestDeviceProfileRoundTrip stores a measured profile, reads it back
// byte for byte, replaces it, and checks the unknown-device and bad-input
// errors.
func TestDeviceProfileRoundTrip(t *testing.T) {
	ctx := context.Background()
	st := open(t)

	if _, err := st.GetDeviceProfile(ctx, "pixel-8-a"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("GetDeviceProfile before any upload: %v, want ErrNotFound", err)
	}
	first := "# measured\nname: pixel-8-a\nbandwidth: 3GB/s\nlatency: 80us\nmax_in_flight: 32\n"
	put, err := st.PutDeviceProfile(ctx, &store.DeviceProfile{DeviceID: "pixel-8-a", Name: "pixel-8-a", YAML: first})
	if err != nil {
		t.Fatal(err)
	}
	got, err := st.GetDeviceProfile(ctx, "pixel-8-a")
	if err != nil || got.YAML != first || got.Name != "pixel-8-a" || !got.UpdatedAt.Equal(put.UpdatedAt) {
		t.Fatalf("GetDeviceProfile = %+v, %v; want the stored YAML at %v", got, err, put.UpdatedAt)
	}

	second := strings.Replace(first, "3GB/s", "2.5GB/s", 1)
	if _, err := st.PutDeviceProfile(ctx, &store.DeviceProfile{DeviceID: "pixel-8-a", Name: "pixel-8-a-v2", YAML: second}); err != nil {
		t.Fatal(err)
	}
	got, err = st.GetDeviceProfile(ctx, "pixel-8-a")
	if err != nil || got.YAML != second || got.Name != "pixel-8-a-v2" || got.UpdatedAt.Before(put.UpdatedAt) {
		t.Fatalf("after replacing: %+v, %v", got, err)
	}
	if _, err := st.GetDeviceProfile(ctx, "pixel-8-b"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("another device: %v, want ErrNotFound", err)
	}

	for _, tc := range []struct {
		name string
		p    store.DeviceProfile
	}{
		{"bad id", store.DeviceProfile{DeviceID: "a.b", YAML: first}},
		{"empty id", store.DeviceProfile{DeviceID: "", YAML: first}},
		{"empty yaml", store.DeviceProfile{DeviceID: "dev", YAML: ""}},
		{"huge yaml", store.DeviceProfile{DeviceID: "dev", YAML: strings.Repeat("#", store.MaxProfileYAML+1)}},
	} {
		if _, err := st.PutDeviceProfile(ctx, &tc.p); err == nil {
			t.Errorf("%s: want an error", tc.name)
		}
	}
}
