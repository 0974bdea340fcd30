package store_test

import (
	"context"
	"testing"
	"time"

	"github.com/lesfarm/lesfarm/coordinator/store"
	"github.com/lesfarm/lesfarm/protocol"
)

// TestDeviceBuildSince: a device's hellos record when its build changed
// and what it ran before; a hello with the same build (a reconnect, a
// restart of the same agent) changes neither.
func TestDeviceBuildSince(t *testing.T) {
	ctx := context.Background()
	st := open(t)
	v1 := protocol.Fingerprint{Platform: "android", DeviceModel: "Pixel 8", AgentBuild: "v0.9.0", RuntimeBuild: "v0.9.0", EmbeddedBuild: "app-0.9.0"}
	v2 := v1
	v2.AgentBuild, v2.EmbeddedBuild = "v0.9.1", "app-0.9.1"
	steps := []struct {
		name            string
		fp              protocol.Fingerprint
		build, previous string
		changed         bool // build_since moved
	}{
		{"first hello", v1, "v0.9.0 · embeds app-0.9.0", "", true},
		{"same build again", v1, "v0.9.0 · embeds app-0.9.0", "", false},
		{"new build", v2, "v0.9.1 · runtime v0.9.0 · embeds app-0.9.1", "v0.9.0 · embeds app-0.9.0", true},
		{"same new build", v2, "v0.9.1 · runtime v0.9.0 · embeds app-0.9.1", "v0.9.0 · embeds app-0.9.0", false},
		{"back to the old build", v1, "v0.9.0 · embeds app-0.9.0", "v0.9.1 · runtime v0.9.0 · embeds app-0.9.1", true},
	}
	var since time.Time
	for _, s := range steps {
		d, err := st.UpsertDevice(ctx, &store.UpsertDeviceParams{ID: "p1", Fingerprint: s.fp, TTL: time.Minute, Coordinator: "c"})
		if err != nil {
			t.Fatal(err)
		}
		if d.BuildSince == nil {
			t.Fatalf("%s: no build_since", s.name)
		}
		if d.Build != s.build || d.PreviousBuild != s.previous || d.BuildSince.Equal(since) == s.changed {
			t.Errorf("%s: build %q previous %q since %v (before %v); want %q, %q, changed %v", s.name, d.Build, d.PreviousBuild, d.BuildSince, since, s.build, s.previous, s.changed)
		}
		since = *d.BuildSince
	}
}
