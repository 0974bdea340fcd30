package client

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"time"
)

// Build is a registered build (GET /v1/builds/{id}).
type Build struct {
	ID          string            `json:"id"`
	Lineage     string            `json:"lineage"`
	Position    int64             `json:"position"`
	Kind        string            `json:"kind"`
	GitSHA      string            `json:"git_sha"`
	Dirty       bool              `json:"dirty"`
	PushedAt    time.Time         `json:"pushed_at"`
	PushedBy    string            `json:"pushed_by"`
	Runs        int64             `json:"runs"`
	Alerts      int64             `json:"alerts"`
	Executables []BuildExecutable `json:"executables"`
}

// BuildExecutable is a build's executable for one platform.
type BuildExecutable struct {
	Platform  string            `json:"platform"`
	SHA256    string            `json:"sha256"`
	Size      int64             `json:"size"`
	GoVersion string            `json:"go_version"`
	Revision  string            `json:"revision"`
	Dirty     bool              `json:"dirty"`
	Settings  map[string]string `json:"settings,omitempty"`
}

// PushExecutable names an uploaded artifact (UploadArtifact) as a build's
// executable for Platform (GOOS/GOARCH).
type PushExecutable struct {
	Platform string `json:"platform"`
	SHA256   string `json:"sha256"`
}

// PushBuildRequest registers a build (POST /v1/builds). Lineage, GitSHA
// and After are optional.
type PushBuildRequest struct {
	ID          string           `json:"id"`
	Lineage     string           `json:"lineage,omitempty"`
	GitSHA      string           `json:"git_sha,omitempty"`
	After       string           `json:"after,omitempty"`
	Executables []PushExecutable `json:"executables"`
}

// PushBuild registers a build whose executables are already uploaded and
// reports whether it was new (false: the same build was already
// registered). A refusal is a *Problem with status 422 and a one-line
// Detail.
func (c *Client) PushBuild(ctx context.Context, req *PushBuildRequest) (*Build, bool, error) {
	b, err := json.Marshal(req)
	if err != nil {
		return nil, false, fmt.Errorf("client: %w", err)
	}
	httpReq, err := c.newRequest(ctx, http.MethodPost, "/v1/builds", nil, bytes.NewReader(b))
	if err != nil {
		return nil, false, err
	}
	httpReq.Header.Set("Content-Type", "application/json")
	resp, err := c.do(httpReq)
	if err != nil {
		return nil, false, fmt.Errorf("client: push build: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode >= 300 {
		return nil, false, decodeProblem(resp)
	}
	var out Build
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		return nil, false, fmt.Errorf("client: push build: %w", err)
	}
	return &out, resp.StatusCode == http.StatusCreated, nil
}

// ListBuilds returns up to limit builds (GET /v1/builds): lineage's newest
// first, or with lineage "" the most recently pushed first.
func (c *Client) ListBuilds(ctx context.Context, lineage string, limit int) ([]Build, error) {
	q := url.Values{}
	if lineage != "" {
		q.Set("lineage", lineage)
	}
	if limit > 0 {
		q.Set("limit", strconv.Itoa(limit))
	}
	var out struct {
		Items []Build `json:"items"`
	}
	if err := c.getJSON(ctx, "/v1/builds", q, &out); err != nil {
		return nil, err
	}
	return out.Items, nil
}

// GetBuild returns the build with id (GET /v1/builds/{id}); an unknown id
// is a *Problem with status 404 naming the nearest ids.
func (c *Client) GetBuild(ctx context.Context, id string) (*Build, error) {
	var out Build
	if err := c.getJSON(ctx, "/v1/builds/"+url.PathEscape(id), nil, &out); err != nil {
		return nil, err
	}
	return &out, nil
}
