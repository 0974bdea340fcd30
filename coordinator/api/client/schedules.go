package client

import (
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"strconv"
	"time"
)

// Schedule is a nightly schedule (GET /v1/schedules/{id}).
type Schedule struct {
	ID             int64           `json:"id"`
	Name           string          `json:"name"`
	Cron           string          `json:"cron"`
	Timezone       string          `json:"timezone"`
	Suite          string          `json:"suite"`
	Build          string          `json:"build"`
	GitSHA         string          `json:"git_sha"`
	Lineage        string          `json:"lineage"`
	DeviceSelector json.RawMessage `json:"device_selector"`
	ConfigOverride json.RawMessage `json:"config_override,omitempty"`
	Priority       int             `json:"priority"`
	Enabled        bool            `json:"enabled"`
	Bisect         string          `json:"bisect"`
	Catchup        string          `json:"catchup"`
	NextFireAt     time.Time       `json:"next_fire_at"`
	LastFiredAt    *time.Time      `json:"last_fired_at,omitempty"`
	CreatedAt      time.Time       `json:"created_at"`
	UpdatedAt      time.Time       `json:"updated_at"`
}

// ScheduleRequest creates a schedule (POST /v1/schedules); empty fields
// take the coordinator's defaults (time zone UTC, lineage main, enabled,
// bisect off, catch-up 1h).
type ScheduleRequest struct {
	Name     string          `json:"name"`
	Cron     string          `json:"cron"`
	Timezone string          `json:"timezone,omitempty"`
	Suite    string          `json:"suite"`
	Build    string          `json:"build,omitempty"`
	GitSHA   string          `json:"git_sha,omitempty"`
	Lineage  string          `json:"lineage,omitempty"`
	Devices  json.RawMessage `json:"devices,omitempty"`
	Override json.RawMessage `json:"override,omitempty"`
	Priority int             `json:"priority,omitempty"`
	Enabled  *bool           `json:"enabled,omitempty"`
	Bisect   string          `json:"bisect,omitempty"`
	Catchup  string          `json:"catchup,omitempty"`
}

// ListSchedules returns every schedule ordered by id, following the
// pages of GET /v1/schedules.
func (c *Client) ListSchedules(ctx context.Context) ([]Schedule, error) {
	var all []Schedule
	var cursor int64
	for {
		q := url.Values{"limit": {"500"}}
		if cursor > 0 {
			q.Set("cursor", strconv.FormatInt(cursor, 10))
		}
		var page struct {
			Items      []Schedule `json:"items"`
			NextCursor int64      `json:"next_cursor"`
		}
		if err := c.getJSON(ctx, "/v1/schedules", q, &page); err != nil {
			return nil, err
		}
		all = append(all, page.Items...)
		if page.NextCursor == 0 {
			return all, nil
		}
		cursor = page.NextCursor
	}
}

// CreateSchedule creates a schedule; a refusal (a bad cron expression, an
// unknown suite, a name taken) is a *Problem with status 409 or 422.
func (c *Client) CreateSchedule(ctx context.Context, req *ScheduleRequest) (*Schedule, error) {
	var out Schedule
	if err := c.doJSON(ctx, http.MethodPost, "/v1/schedules", nil, req, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// DeleteSchedule deletes schedule id; an unknown id is a *Problem with
// status 404.
func (c *Client) DeleteSchedule(ctx context.Context, id int64) error {
	return c.doJSON(ctx, http.MethodDelete, "/v1/schedules/"+strconv.FormatInt(id, 10), nil, nil, nil)
}
