package client

import (
	"context"
	"net/http"
	"strconv"
	"time"
)

// BisectRequest asks for a bisection of an alert group (POST
// /v1/alerts/{id}/bisect; docs/bisect.md). Zero fields take the server's
// defaults.
type BisectRequest struct {
	AlertID   int64  `json:"alert_id,omitempty"`
	LastGood  string `json:"last_good,omitempty"`
	FirstBad  string `json:"first_bad,omitempty"`
	Budget    string `json:"budget,omitempty"`
	MaxRounds int    `json:"max_rounds,omitempty"`
}

// Bisection is a bisection (api.Bisection).
type Bisection struct {
	ID            int64            `json:"id"`
	GroupID       int64            `json:"group_id"`
	AlertID       int64            `json:"alert_id"`
	Suite         string           `json:"suite"`
	Lineage       string           `json:"lineage"`
	Config        string           `json:"config"`
	Metric        string           `json:"metric"`
	Configs       []string         `json:"configs"`
	DeviceModel   string           `json:"device_model"`
	DeviceID      string           `json:"device_id"`
	State         string           `json:"state"`
	Reason        string           `json:"reason"`
	Expected      float64          `json:"expected"`
	Effect        float64          `json:"effect"`
	LastGood      BisectionBuild   `json:"last_good"`
	FirstBad      BisectionBuild   `json:"first_bad"`
	Culprit       *Culprit         `json:"culprit,omitempty"`
	Builds        []BisectionBuild `json:"builds"`
	Steps         []BisectionStep  `json:"steps"`
	BudgetSeconds float64          `json:"budget_seconds"`
	DeviceSeconds float64          `json:"device_seconds"`
	Runs          int              `json:"runs"`
	CreatedAt     time.Time        `json:"created_at"`
	FinishedAt    *time.Time       `json:"finished_at,omitempty"`
}

// BisectionBuild is one build of a bisection's range.
type BisectionBuild struct {
	ID       string `json:"id"`
	GitSHA   string `json:"git_sha"`
	Position int64  `json:"position"`
	State    string `json:"state"`
	Skipped  string `json:"skipped"`
}

// Culprit is a bisection's answer.
type Culprit struct {
	FirstBad BisectionBuild `json:"first_bad"`
	LastGood BisectionBuild `json:"last_good"`
	GitLog   string         `json:"git_log"`
	Change   float64        `json:"change"`
}

// BisectionStep is one A/B comparison of a bisection.
type BisectionStep struct {
	Step      int            `json:"step"`
	Kind      string         `json:"kind"`
	BuildA    string         `json:"build_a"`
	BuildB    string         `json:"build_b"`
	DeviceID  string         `json:"device_id"`
	ABID      int64          `json:"ab_id"`
	State     string         `json:"state"`
	Judgement string         `json:"judgement"`
	Rounds    int            `json:"rounds"`
	Summary   string         `json:"summary"`
	Note      string         `json:"note"`
	NA        int            `json:"n_a"`
	NB        int            `json:"n_b"`
	P         float64        `json:"p"`
	Change    float64        `json:"change"`
	Low       float64        `json:"change_low"`
	High      float64        `json:"change_high"`
	Runs      map[string]int `json:"runs"`
}

// StartBisection calls POST /v1/alerts/{id}/bisect.
func (c *Client) StartBisection(ctx context.Context, groupID int64, req *BisectRequest) (*Bisection, error) {
	var out Bisection
	if err := c.doJSON(ctx, http.MethodPost, "/v1/alerts/"+strconv.FormatInt(groupID, 10)+"/bisect", nil, req, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// GetBisection calls GET /v1/bisections/{id}, which also advances it.
func (c *Client) GetBisection(ctx context.Context, id int64) (*Bisection, error) {
	var out Bisection
	if err := c.getJSON(ctx, "/v1/bisections/"+strconv.FormatInt(id, 10), nil, &out); err != nil {
		return nil, err
	}
	return &out, nil
}
