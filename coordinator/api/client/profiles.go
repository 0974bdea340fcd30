package client

import (
	"context"
	"net/http"
	"net/url"
	"time"
)

// DeviceProfile is a device's measured profile as the coordinator stores it.
type DeviceProfile struct {
	DeviceID  string    `json:"device_id"`
	Name      string    `json:"name"`
	YAML      string    `json:"yaml"`
	UpdatedAt time.Time `json:"updated_at"`
}

// PutDeviceProfile uploads yaml (a file written by `lesfarm profile
// measure`) as deviceID's measured profile. The server validates it; a
// profile it refuses is a *Problem with status 422.
func (c *Client) PutDeviceProfile(ctx context.Context, deviceID, yaml string) (*DeviceProfile, error) {
	var out DeviceProfile
	body := map[string]string{"yaml": yaml}
	if err := c.doJSON(ctx, http.MethodPut, "/v1/devices/"+url.PathEscape(deviceID)+"/profile", nil, body, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// GetDeviceProfile returns deviceID's measured profile; a device without
// one is a *Problem with status 404.
func (c *Client) GetDeviceProfile(ctx context.Context, deviceID string) (*DeviceProfile, error) {
	var out DeviceProfile
	if err := c.doJSON(ctx, http.MethodGet, "/v1/devices/"+url.PathEscape(deviceID)+"/profile", nil, nil, &out); err != nil {
		return nil, err
	}
	return &out, nil
}
