package store

// SetTelemetryHeld installs the hook InsertTelemetry calls inside its
// transaction after the token check.
func (s *Store) SetTelemetryHeld(f func()) { s.telemetryHeld = f }
