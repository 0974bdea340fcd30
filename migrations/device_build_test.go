package migrations_test

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/lesfarm/lesfarm/coordinator/store"
	"github.com/lesfarm/lesfarm/internal/testenv"
	"github.com/lesfarm/lesfarm/migrations"
	"github.com/lesfarm/lesfarm/protocol"
)

// TestDeviceBuildMigration: 00065 fills each existing device's build from
// its fingerprint exactly as store.DeviceBuild does on hello (else the
// first hello after the migration would record a change that did not
// happen), with build_since unknown and no previous build.
func TestDeviceBuildMigration(t *testing.T) {
	ctx := context.Background()
	url := testenv.PostgresURL(t)
	m, err := migrations.New(url)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	if _, err := m.Up(ctx); err != nil {
		t.Fatal(err)
	}
	downTo(ctx, t, m, 64)
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	fps := map[string]protocol.Fingerprint{
		"none":     {},
		"same":     {AgentBuild: "v0.9.0", RuntimeBuild: "v0.9.0"},
		"differs":  {AgentBuild: "v0.9.1", RuntimeBuild: "v0.9.0", EmbeddedBuild: "app-0.9.1"},
		"embedded": {EmbeddedBuild: "embedded-abc"},
		"runtime":  {RuntimeBuild: "v0.8.0"},
	}
	for id, fp := range fps {
		b, err := json.Marshal(fp)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := conn.Exec(ctx, `INSERT INTO devices (id, fingerprint, platform, device_model, os_version) VALUES ($1, $2, 'linux', 'm', 'os')`, id, b); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := m.Up(ctx); err != nil {
		t.Fatal(err)
	}
	for id, fp := range fps {
		var build, prev string
		var since *string
		if err := conn.QueryRow(ctx, `SELECT build, build_since::text, previous_build FROM devices WHERE id = $1`, id).Scan(&build, &since, &prev); err != nil {
			t.Fatal(err)
		}
		if want := store.DeviceBuild(&fp); build != want || since != nil || prev != "" {
			t.Errorf("device %s after 00065: build %q since %v previous %q; want %q, unknown, none", id, build, since, prev, want)
		}
	}
}
