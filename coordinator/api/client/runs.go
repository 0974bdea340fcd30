package client

import (
	"bufio"
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/lesfarm/lesfarm/jobs"
)

// TriggerRequest asks for runs of a suite on a build (POST /v1/runs).
type TriggerRequest struct {
	Suite  string `json:"suite"`
	Build  string `json:"build"`
	GitSHA string `json:"git_sha,omitempty"`
	// Lineage is the build lineage (branch) of the runs; "" lets the
	// server use its default, "main".
	Lineage  string          `json:"lineage,omitempty"`
	Devices  *jobs.Selector  `json:"devices,omitempty"`
	Override json.RawMessage `json:"override,omitempty"`
	Fanout   bool            `json:"fanout,omitempty"`
}

// Run is the part of a run the client shows.
type Run struct {
	ID              int64   `json:"id"`
	Suite           string  `json:"suite"`
	Build           string  `json:"build"`
	Lineage         string  `json:"lineage"`
	DeviceID        string  `json:"device_id"`
	TargetDeviceID  string  `json:"target_device_id"`
	State           string  `json:"state"`
	Attempts        int     `json:"attempts"`
	Progress        float64 `json:"progress"`
	ProgressMessage string  `json:"progress_message"`
	Error           string  `json:"error"`
}

// RunSet is a trigger and its runs.
type RunSet struct {
	Trigger struct {
		ID      int64   `json:"id"`
		Suite   string  `json:"suite"`
		Build   string  `json:"build"`
		Lineage string  `json:"lineage"`
		RunIDs  []int64 `json:"run_ids"`
	} `json:"trigger"`
	Runs []Run `json:"runs"`
	Done bool  `json:"done"`
}

// TriggerRuns calls POST /v1/runs.
func (c *Client) TriggerRuns(ctx context.Context, req *TriggerRequest) (*RunSet, error) {
	var out RunSet
	if err := c.doJSON(ctx, http.MethodPost, "/v1/runs", nil, req, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// RunEvent is a "run" event of the progress stream.
type RunEvent struct {
	RunID           int64   `json:"run_id"`
	State           string  `json:"state"`
	DeviceID        string  `json:"device_id"`
	Attempts        int     `json:"attempts"`
	Progress        float64 `json:"progress"`
	ProgressMessage string  `json:"progress_message"`
	Error           string  `json:"error"`
	// WaitingReason says why a queued run waits (see api.Run).
	WaitingReason string `json:"waiting_reason"`
}

// DoneEvent is the final event of the progress stream.
type DoneEvent struct {
	Runs      int            `json:"runs"`
	States    map[string]int `json:"states"`
	Succeeded bool           `json:"succeeded"`
}

// FollowTrigger streams GET /v1/runs/events?trigger=ID, calling onRun for
// each run event, until the done event, which it returns. A dropped stream,
// an unreachable coordinator or a 5xx answer (503 while its database is
// down) is retried with backoff, honouring Retry-After, for up to
// FollowOutage since the stream last delivered an event; reopening resends
// the current states. A 4xx answer ends the wait at once.
func (c *Client) FollowTrigger(ctx context.Context, triggerID int64, onRun func(RunEvent)) (*DoneEvent, error) {
	r := c.newRetrier(cmp.Or(c.FollowOutage, 2*time.Minute))
	for {
		progressed := false
		done, err := c.followOnce(ctx, triggerID, func(ev RunEvent) {
			progressed = true
			if onRun != nil {
				onRun(ev)
			}
		})
		if done != nil || ctx.Err() != nil {
			return done, err
		}
		if progressed {
			r.worked()
		}
		if ok, err := r.again(ctx, err); !ok {
			return nil, err
		}
	}
}

func (c *Client) followOnce(ctx context.Context, triggerID int64, onRun func(RunEvent)) (*DoneEvent, error) {
	req, err := c.newRequest(ctx, http.MethodGet, "/v1/runs/events", url.Values{"trigger": {strconv.FormatInt(triggerID, 10)}}, nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Accept", "text/event-stream")
	resp, err := c.do(req)
	if err != nil {
		return nil, fmt.Errorf("client: events: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode >= 300 {
		return nil, decodeProblem(resp)
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	event := ""
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "event:"):
			event = strings.TrimSpace(strings.TrimPrefix(line, "event:"))
		case strings.HasPrefix(line, "data:"):
			data := strings.TrimSpace(strings.TrimPrefix(line, "data:"))
			switch event {
			case "run":
				var ev RunEvent
				if err := json.Unmarshal([]byte(data), &ev); err == nil && onRun != nil {
					onRun(ev)
				}
			case "done":
				var d DoneEvent
				if err := json.Unmarshal([]byte(data), &d); err != nil {
					return nil, fmt.Errorf("client: bad done event: %w", err)
				}
				return &d, nil
			case "error":
				p := &Problem{}
				if err := json.Unmarshal([]byte(data), p); err != nil {
					return nil, fmt.Errorf("run events: undecodable error event %q: %w", data, err)
				}
				return nil, p
			}
		case line == "":
			event = ""
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("client: events: %w", err)
	}
	return nil, fmt.Errorf("client: events stream ended before completion")
}

// AlertGroup is the part of an alert group the client shows.
type AlertGroup struct {
	ID         int64     `json:"id"`
	Suite      string    `json:"suite"`
	Lineage    string    `json:"lineage"`
	Build      string    `json:"build"`
	Scope      string    `json:"scope"`
	Summary    string    `json:"summary"`
	Regression bool      `json:"regression"`
	Status     string    `json:"status"`
	CreatedAt  time.Time `json:"created_at"`
}

// AlertsForBuild lists the alert groups recorded at build (and suite).
func (c *Client) AlertsForBuild(ctx context.Context, suite, build string) ([]AlertGroup, error) {
	var out struct {
		Items []AlertGroup `json:"items"`
	}
	q := url.Values{"build": {build}, "limit": {"500"}}
	if suite != "" {
		q.Set("suite", suite)
	}
	if err := c.getJSON(ctx, "/v1/alerts", q, &out); err != nil {
		return nil, err
	}
	return out.Items, nil
}

// ParseSelector parses the CLI's device selector syntax, comma-separated
// key=value pairs:
//
//	platform=android,model=Pixel 8,min_ram=8GiB,emulated=false,pool=ci
//
// platform, model (or device_model), min_ram and emulated are selector
// fields; any other key is a label that must match. The result is checked
// with the jobs package's rules by the server.
func ParseSelector(s string) (*jobs.Selector, error) {
	s = strings.TrimSpace(s)
	if s == "" || s == "*" || s == "all" {
		return nil, nil
	}
	sel := &jobs.Selector{}
	for _, part := range strings.Split(s, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		k, v, ok := strings.Cut(part, "=")
		k, v = strings.TrimSpace(k), strings.TrimSpace(v)
		if !ok || k == "" {
			return nil, fmt.Errorf("device selector: %q is not key=value", part)
		}
		switch strings.ToLower(k) {
		case "platform":
			sel.Platform = strings.ToLower(v)
		case "model", "device_model":
			sel.DeviceModel = v
		case "min_ram", "ram":
			n, err := jobs.ParseByteSize(v)
			if err != nil {
				return nil, fmt.Errorf("device selector: min_ram: %v", err)
			}
			sel.MinRAM = n
		case "emulated":
			b, err := strconv.ParseBool(v)
			if err != nil {
				return nil, fmt.Errorf("device selector: emulated must be true or false, got %q", v)
			}
			sel.Emulated = &b
		default:
			if sel.Labels == nil {
				sel.Labels = map[string]string{}
			}
			if _, dup := sel.Labels[k]; dup {
				return nil, fmt.Errorf("device selector: label %q given twice", k)
			}
			sel.Labels[k] = v
		}
	}
	return sel, nil
}

// Result is the part of a per-config result the client shows.
type Result struct {
	ConfigKey string `json:"config_key"`
	DecodeTPS struct {
		Mean   float64 `json:"mean"`
		Stddev float64 `json:"stddev"`
	} `json:"decode_tps"`
	TTFTms struct {
		Mean float64 `json:"mean"`
	} `json:"ttft_ms"`
	HitRate       float64 `json:"hit_rate"`
	StallFraction float64 `json:"stall_fraction"`
	Valid         bool    `json:"valid"`
	InvalidReason string  `json:"invalid_reason"`
	Error         string  `json:"error"`
}

// RunDetail is a run with its results (GET /v1/runs/{id}).
type RunDetail struct {
	Run
	Results []Result `json:"results"`
}

// GetRun calls GET /v1/runs/{id}.
func (c *Client) GetRun(ctx context.Context, id int64) (*RunDetail, error) {
	var out RunDetail
	if err := c.getJSON(ctx, "/v1/runs/"+strconv.FormatInt(id, 10), nil, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// RunFilter selects runs for ListRuns; zero fields do not filter.
type RunFilter struct {
	Suite, Build, Lineage, DeviceID, State string
	Limit                                  int // default 50
}

// ListRuns calls GET /v1/runs (newest first, one page).
func (c *Client) ListRuns(ctx context.Context, f RunFilter) ([]Run, error) {
	q := url.Values{}
	for k, v := range map[string]string{"suite": f.Suite, "build": f.Build, "lineage": f.Lineage, "device_id": f.DeviceID, "state": f.State} {
		if v != "" {
			q.Set(k, v)
		}
	}
	if f.Limit > 0 {
		q.Set("limit", strconv.Itoa(f.Limit))
	}
	var out struct {
		Items []Run `json:"items"`
	}
	if err := c.getJSON(ctx, "/v1/runs", q, &out); err != nil {
		return nil, err
	}
	return out.Items, nil
}
