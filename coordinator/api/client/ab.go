package client

import (
	"context"
	"net/http"
	"net/url"
	"strconv"
	"time"
)

// ABRequest asks for an A/B comparison of Build with Baseline (POST
// /v1/runs with a baseline; docs/ab.md).
type ABRequest struct {
	TriggerRequest
	// Baseline is a build id of the same lineage, or "auto".
	Baseline  string  `json:"baseline"`
	MinEffect float64 `json:"min_effect,omitempty"`
	MaxRounds int     `json:"max_rounds,omitempty"`
}

// ABTrigger is POST /v1/runs's answer to an ABRequest.
type ABTrigger struct {
	RunSet
	AB *AB `json:"ab"`
}

// AB is an A/B comparison (api.ABComparison).
type AB struct {
	ID            int64        `json:"id"`
	Suite         string       `json:"suite"`
	Build         string       `json:"build"`
	Baseline      string       `json:"baseline"`
	Lineage       string       `json:"lineage"`
	Devices       []string     `json:"devices"`
	MinEffect     float64      `json:"min_effect"`
	InitialRounds int          `json:"initial_rounds"`
	StepRounds    int          `json:"step_rounds"`
	MaxRounds     int          `json:"max_rounds"`
	Rounds        int          `json:"rounds"`
	State         string       `json:"state"`
	Verdict       string       `json:"verdict,omitempty"`
	Summary       string       `json:"summary,omitempty"`
	Decisions     []ABDecision `json:"decisions"`
	Problems      []string     `json:"problems,omitempty"`
	Runs          []ABRun      `json:"runs"`
	CreatedAt     time.Time    `json:"created_at"`
}

// ABDecision is the comparison of one metric of one config on one device.
type ABDecision struct {
	DeviceID      string  `json:"device_id"`
	ConfigKey     string  `json:"config_key"`
	Metric        string  `json:"metric"`
	Verdict       string  `json:"verdict"`
	Outcome       string  `json:"outcome"`
	P             float64 `json:"p"`
	PKS           float64 `json:"p_ks"`
	PMWU          float64 `json:"p_mwu"`
	SameThreshold float64 `json:"same_threshold"`
	Change        float64 `json:"change"`
	Low           float64 `json:"change_low"`
	High          float64 `json:"change_high"`
	Level         float64 `json:"level"`
	CV            float64 `json:"cv"`
	MeanA         float64 `json:"mean_a"`
	MeanB         float64 `json:"mean_b"`
	NA            int     `json:"n_a"`
	NB            int     `json:"n_b"`
	Reason        string  `json:"reason"`
}

// ABRun is one run of a comparison.
type ABRun struct {
	RunID         int64   `json:"run_id"`
	Round         int     `json:"round"`
	Side          string  `json:"side"`
	Build         string  `json:"build"`
	DeviceID      string  `json:"device_id"`
	State         string  `json:"state"`
	Progress      float64 `json:"progress"`
	Error         string  `json:"error"`
	WaitingReason string  `json:"waiting_reason"`
}

// TriggerAB calls POST /v1/runs with a baseline.
func (c *Client) TriggerAB(ctx context.Context, req *ABRequest) (*ABTrigger, error) {
	var out ABTrigger
	if err := c.doJSON(ctx, http.MethodPost, "/v1/runs", nil, req, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// GetAB calls GET /v1/ab/{id}, which also advances the comparison.
func (c *Client) GetAB(ctx context.Context, id int64) (*AB, error) {
	var out AB
	if err := c.getJSON(ctx, "/v1/ab/"+strconv.FormatInt(id, 10), nil, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// LineageAlertsSince lists the regression alert groups of lineage (and
// suite, when not empty) created at or after since, at any build.
func (c *Client) LineageAlertsSince(ctx context.Context, suite, lineage string, since time.Time) ([]AlertGroup, error) {
	var out struct {
		Items []AlertGroup `json:"items"`
	}
	q := url.Values{"lineage": {lineage}, "regression": {"true"}, "since": {since.UTC().Format(time.RFC3339)}, "limit": {"500"}}
	if suite != "" {
		q.Set("suite", suite)
	}
	if err := c.getJSON(ctx, "/v1/alerts", q, &out); err != nil {
		return nil, err
	}
	return out.Items, nil
}
