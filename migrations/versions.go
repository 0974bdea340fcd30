package migrations

import (
	"context"
	"fmt"
)

// SchemaAheadError is returned when the database's schema is newer than
// this binary: a migration the binary does not know was applied (by a
// newer lesfarm). An older coordinator on a newer schema went ready and
// then failed every telemetry batch for ever (issue 29, finding 6), so
// serve refuses to start instead, naming both versions.
type SchemaAheadError struct {
	// Database is the highest migration version applied to the database;
	// Binary the newest migration embedded in this binary.
	Database, Binary int64
}

// Error implements error.
func (e *SchemaAheadError) Error() string {
	return fmt.Sprintf("migrations: the database schema is at version %05d, newer than this binary's newest migration %05d: "+
		"run the lesfarm that migrated it (or a newer one), or roll the schema back with it ('lesfarm migrate down')", e.Database, e.Binary)
}

// Newest returns the highest version of the embedded migrations.
func (m *Migrator) Newest() int64 {
	var v int64
	for _, s := range m.provider.ListSources() {
		v = max(v, s.Version)
	}
	return v
}

// DBVersion returns the highest migration version applied to the database
// (0 when none is).
func (m *Migrator) DBVersion(ctx context.Context) (int64, error) {
	v, err := m.provider.GetDBVersion(ctx)
	if err != nil {
		return 0, fmt.Errorf("migrations: database version: %w", err)
	}
	return max(v, 0), nil
}

// CheckNotAhead returns a *SchemaAheadError when the database has a
// migration applied that is newer than every embedded one.
func (m *Migrator) CheckNotAhead(ctx context.Context) error {
	v, err := m.DBVersion(ctx)
	if err != nil {
		return err
	}
	if newest := m.Newest(); v > newest {
		return &SchemaAheadError{Database: v, Binary: newest}
	}
	return nil
}
