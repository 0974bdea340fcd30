package store_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/lesfarm/lesfarm/coordinator/store"
	"github.com/lesfarm/lesfarm/protocol"
)

// TestClaimSkipsDeviceWithoutRoom: a device whose hello reported less
// room for artifacts than the run's model does not get the run (ErrUnfit,
// no attempt used); a device with room, or one that reported no figure,
// does (issue 29, finding 10: the full device took every run and failed
// it within seconds, blamed on the build).
func TestClaimSkipsDeviceWithoutRoom(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := open(t)
	spec := smoke(t)
	size := int64(spec.Model.Size)
	tests := []struct {
		name string
		free *int64
		fits bool
	}{
		{"full", i64(size - 1), false},
		{"room", i64(size), true},
		{"unknown", nil, true},
	}
	for _, tc := range tests {
		if _, err := st.UpsertDevice(ctx, &store.UpsertDeviceParams{ID: tc.name, TTL: 15 * time.Second,
			Fingerprint: protocol.Fingerprint{Platform: "android", DeviceModel: "Pixel 8", RAMBytes: i64(8 << 30), FreeStorageBytes: tc.free}}); err != nil {
			t.Fatal(err)
		}
		_, runs, err := st.CreateRuns(ctx, &store.CreateRunsParams{Spec: spec, Build: "b-" + tc.name})
		if err != nil {
			t.Fatal(err)
		}
		g, err := st.ClaimRun(ctx, &store.ClaimRunParams{DeviceID: tc.name, RunIDs: []int64{runs[0].ID}, LeaseTTL: 10 * time.Second, Coordinator: "t"})
		if tc.fits {
			if err != nil || g.Run.ID != runs[0].ID {
				t.Fatalf("%s: claim %v, want the run", tc.name, err)
			}
			continue
		}
		if !errors.Is(err, store.ErrUnfit) {
			t.Fatalf("%s: claim %v, want ErrUnfit", tc.name, err)
		}
		r, err := st.GetRun(ctx, runs[0].ID)
		if err != nil || r.State != store.RunQueued || r.Attempts != 0 {
			t.Fatalf("%s: run after the refusal %+v (%v), want queued with no attempt", tc.name, r, err)
		}
	}
}

// TestFreeStorageFollowsHeartbeats: a device whose hello reported room
// but whose disk filled since (SetDeviceFreeStorage, from a heartbeat of
// an agent short of storage) no longer gets a run whose model is larger,
// and gets it again once a heartbeat reports the room back; an unknown
// device is ErrNotFound.
func TestFreeStorageFollowsHeartbeats(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := open(t)
	spec := smoke(t)
	size := int64(spec.Model.Size)
	if _, err := st.UpsertDevice(ctx, &store.UpsertDeviceParams{ID: "filled", TTL: 15 * time.Second,
		Fingerprint: protocol.Fingerprint{Platform: "android", DeviceModel: "Pixel 8", RAMBytes: i64(8 << 30), FreeStorageBytes: i64(4 * size)}}); err != nil {
		t.Fatal(err)
	}
	_, runs, err := st.CreateRuns(ctx, &store.CreateRunsParams{Spec: spec, Build: "b-filled"})
	if err != nil {
		t.Fatal(err)
	}
	claim := func(free int64) error {
		if err := st.SetDeviceFreeStorage(ctx, "filled", free); err != nil {
			t.Fatal(err)
		}
		d, err := st.GetDevice(ctx, "filled")
		if err != nil || d.Fingerprint.FreeStorageBytes == nil || *d.Fingerprint.FreeStorageBytes != free {
			t.Fatalf("device after SetDeviceFreeStorage(%d): %+v (%v)", free, d, err)
		}
		_, err = st.ClaimRun(ctx, &store.ClaimRunParams{DeviceID: "filled", RunIDs: []int64{runs[0].ID}, LeaseTTL: 10 * time.Second, Coordinator: "t"})
		return err
	}
	if err := claim(size - 1); !errors.Is(err, store.ErrUnfit) {
		t.Fatalf("claim with %d bytes free: %v, want ErrUnfit", size-1, err)
	}
	if err := claim(size); err != nil {
		t.Fatalf("claim once the room is back: %v", err)
	}
	if err := st.SetDeviceFreeStorage(ctx, "nobody", 1); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("unknown device: %v, want ErrNotFound", err)
	}
}
