package store

import (
	"context"
	"fmt"
	"time"
)

// MaxProfileYAML is the largest measured profile the store keeps (the
// table's CHECK constraint says the same): profile measure writes a few KiB.
const MaxProfileYAML = 256 << 10

// DeviceProfile is a device's measured profile: the YAML `lesfarm profile
// measure` wrote on it, as uploaded. The store does not parse it; the API
// validates it before PutDeviceProfile.
type DeviceProfile struct {
	DeviceID  string    `json:"device_id"`
	Name      string    `json:"name"`
	YAML      string    `json:"yaml"`
	UpdatedAt time.Time `json:"updated_at"`
}

// PutDeviceProfile stores p as deviceID's measured profile, replacing any
// earlier one, and returns the stored row.
func (s *Store) PutDeviceProfile(ctx context.Context, p *DeviceProfile) (*DeviceProfile, error) {
	if !credDeviceIDRE.MatchString(p.DeviceID) {
		return nil, fmt.Errorf("store: device id %q: want 1 to 64 letters, digits, '_' or '-'", p.DeviceID)
	}
	if len(p.YAML) == 0 || len(p.YAML) > MaxProfileYAML {
		return nil, fmt.Errorf("store: device profile of %s: %d bytes, want 1 to %d", p.DeviceID, len(p.YAML), MaxProfileYAML)
	}
	out := &DeviceProfile{DeviceID: p.DeviceID, Name: p.Name, YAML: p.YAML}
	err := s.pool.QueryRow(ctx,
		`INSERT INTO device_profiles (device_id, name, profile_yaml) VALUES ($1, $2, $3)
		 ON CONFLICT (device_id) DO UPDATE SET name = EXCLUDED.name, profile_yaml = EXCLUDED.profile_yaml, updated_at = now()
		 RETURNING updated_at`,
		p.DeviceID, p.Name, p.YAML).Scan(&out.UpdatedAt)
	if err != nil {
		return nil, fmt.Errorf("store: put device profile: %w", err)
	}
	return out, nil
}

// GetDeviceProfile returns deviceID's measured profile, or ErrNotFound when
// none was uploaded.
func (s *Store) GetDeviceProfile(ctx context.Context, deviceID string) (*DeviceProfile, error) {
	p := &DeviceProfile{DeviceID: deviceID}
	err := s.pool.QueryRow(ctx,
		`SELECT name, profile_yaml, updated_at FROM device_profiles WHERE device_id = $1`, deviceID).
		Scan(&p.Name, &p.YAML, &p.UpdatedAt)
	if err != nil {
		return nil, notFound(err)
	}
	return p, nil
}
