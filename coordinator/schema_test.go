package coordinator_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/lesfarm/lesfarm/coordinator"
	"github.com/lesfarm/lesfarm/coordinator/coordinatortest"
	"github.com/lesfarm/lesfarm/migrations"
)

// TestStartRefusesNewerSchema: a coordinator (what serve starts) refuses
// to come up on a database migrated past its newest migration, naming
// both versions, instead of going ready and failing every telemetry batch
// (issue 29, finding 6).
func TestStartRefusesNewerSchema(t *testing.T) {
	f := newFarm(t)
	cfg := coordinatortest.Config(t, coordinator.Config{Name: "old", Logger: quietLogger(), ArtifactBaseURL: "http://127.0.0.1:1"}, f.dbURL, f.natsURL)
	m, err := migrations.New(f.dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	newest := m.Newest()
	if _, err := cfg.Store.Pool().Exec(context.Background(), `INSERT INTO goose_db_version (version_id, is_applied) VALUES ($1, true)`, newest+7); err != nil {
		t.Fatal(err)
	}
	c, err := coordinator.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	err = c.Start(context.Background())
	if err == nil {
		_ = c.Stop()
		t.Fatal("started on a schema newer than the binary")
	}
	var ahead *migrations.SchemaAheadError
	if !errors.As(err, &ahead) || !strings.Contains(err.Error(), fmt.Sprintf("%05d", newest+7)) || !strings.Contains(err.Error(), fmt.Sprintf("%05d", newest)) {
		t.Fatalf("Start: %v; want both versions named", err)
	}
}
