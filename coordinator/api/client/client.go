// Package client is a small Go client of the coordinator's REST API, used
// by the lesfarm CLI (run, artifact) and by CI scripts. It speaks plain
// net/http and decodes RFC 9457 problem documents into *Problem errors.
package client

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// Client calls one coordinator. The zero value is not usable; use New.
// It is safe for concurrent use.
type Client struct {
	base  *url.URL
	token string
	http  *http.Client

	// FollowOutage is how long FollowTrigger keeps reconnecting while the
	// coordinator is unreachable or answers 5xx, counted from the last
	// time the stream worked (default 2 min: a coordinator restart or a
	// short database outage is waited out). Set before use.
	FollowOutage time.Duration
	// ReadOutage is how long GetRun, ListRuns and AlertsForBuild retry
	// while the coordinator is unreachable or answers 5xx, as
	// FollowTrigger does (zero: no retries). lesfarm run --wait sets it so
	// that the report after the wait rides out a restart too. Set before
	// use.
	ReadOutage time.Duration
	// RetryMin and RetryMax bound the wait between reconnects (doubling;
	// a Retry-After from the server is honoured up to RetryMax); default
	// 500 ms and 5 s. Set before use.
	RetryMin, RetryMax time.Duration
}

// New returns a client of the coordinator at server (e.g.
// "http://127.0.0.1:8080", or https:// with WithCAFile for a lab CA),
// sending token (may be empty for reads).
func New(server, token string, opts ...Option) (*Client, error) {
	if server == "" {
		return nil, errors.New("client: server URL is empty")
	}
	if !strings.Contains(server, "://") {
		server = "http://" + server
	}
	u, err := url.Parse(server)
	if err != nil || u.Host == "" || (u.Scheme != "http" && u.Scheme != "https") {
		return nil, fmt.Errorf("client: bad server URL %q", server)
	}
	u.Path = strings.TrimSuffix(u.Path, "/")
	// No overall timeout: uploads and waits are long; callers use ctx.
	c := &Client{base: u, token: token, http: &http.Client{}}
	for _, o := range opts {
		if err := o(c); err != nil {
			return nil, err
		}
	}
	return c, nil
}

// Problem is an RFC 9457 error returned by the API.
type Problem struct {
	// RetryAfter is the server's Retry-After (503 while a dependency is
	// down), zero when absent.
	RetryAfter time.Duration `json:"-"`

	Status int    `json:"status"`
	Title  string `json:"title"`
	Detail string `json:"detail"`
	Errors []struct {
		Message  string `json:"message"`
		Location string `json:"location"`
	} `json:"errors"`
}

// Error formats the problem on one line, with each located error.
func (p *Problem) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%d %s", p.Status, cmp.Or(p.Title, http.StatusText(p.Status)))
	if p.Detail != "" {
		b.WriteString(": " + p.Detail)
	}
	for _, e := range p.Errors {
		if e.Location != "" {
			fmt.Fprintf(&b, "; %s: %s", e.Location, e.Message)
		} else {
			fmt.Fprintf(&b, "; %s", e.Message)
		}
	}
	return b.String()
}

func (c *Client) url(path string, q url.Values) string {
	u := *c.base
	u.Path += path
	if len(q) > 0 {
		u.RawQuery = q.Encode()
	}
	return u.String()
}

func (c *Client) newRequest(ctx context.Context, method, path string, q url.Values, body io.Reader) (*http.Request, error) {
	req, err := http.NewRequestWithContext(ctx, method, c.url(path, q), body)
	if err != nil {
		return nil, fmt.Errorf("client: %w", err)
	}
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	return req, nil
}

// send performs req and decodes a JSON response into out (when not nil).
// Non-2xx answers become *Problem.
func (c *Client) send(req *http.Request, out any) error {
	resp, err := c.do(req)
	if err != nil {
		return fmt.Errorf("client: %s %s: %w", req.Method, req.URL.Path, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode >= 300 {
		return decodeProblem(resp)
	}
	if out == nil {
		_, _ = io.Copy(io.Discard, resp.Body) // drained for connection reuse
		return nil
	}
	if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
		return fmt.Errorf("client: decode %s %s: %w", req.Method, req.URL.Path, err)
	}
	return nil
}

func decodeProblem(resp *http.Response) error {
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	p := &Problem{Status: resp.StatusCode}
	if err := json.Unmarshal(b, p); err != nil || p.Status == 0 {
		p = &Problem{Status: resp.StatusCode, Detail: strings.TrimSpace(string(b))}
	}
	if secs, err := strconv.Atoi(resp.Header.Get("Retry-After")); err == nil && secs > 0 {
		p.RetryAfter = time.Duration(secs) * time.Second
	}
	return p
}

func (c *Client) doJSON(ctx context.Context, method, path string, q url.Values, in, out any) error {
	var body io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return fmt.Errorf("client: %w", err)
		}
		body = bytes.NewReader(b)
	}
	req, err := c.newRequest(ctx, method, path, q, body)
	if err != nil {
		return err
	}
	if in != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	return c.send(req, out)
}

// Artifact is an artifact's metadata.
type Artifact struct {
	SHA256    string    `json:"sha256"`
	Size      int64     `json:"size"`
	Name      string    `json:"name"`
	CreatedAt time.Time `json:"created_at"`
}

// UploadArtifact streams size bytes from r to POST /v1/artifacts. When
// sha256 is not empty the server checks the content against it. It
// returns the stored artifact and whether it was new.
func (c *Client) UploadArtifact(ctx context.Context, r io.Reader, size int64, name, sha256 string) (*Artifact, bool, error) {
	q := url.Values{}
	if name != "" {
		q.Set("name", name)
	}
	if sha256 != "" {
		q.Set("sha256", sha256)
	}
	req, err := c.newRequest(ctx, http.MethodPost, "/v1/artifacts", q, r)
	if err != nil {
		return nil, false, err
	}
	req.ContentLength = size
	req.Header.Set("Content-Type", "application/octet-stream")
	resp, err := c.do(req)
	if err != nil {
		return nil, false, fmt.Errorf("client: upload: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode >= 300 {
		return nil, false, decodeProblem(resp)
	}
	var a Artifact
	if err := json.NewDecoder(resp.Body).Decode(&a); err != nil {
		return nil, false, fmt.Errorf("client: upload: %w", err)
	}
	return &a, resp.StatusCode == http.StatusCreated, nil
}

// GCReport is the answer of POST /v1/artifacts/gc.
type GCReport struct {
	Removed      []string `json:"removed"`
	FreedBytes   int64    `json:"freed_bytes"`
	StrayFiles   []string `json:"stray_files"`
	PartialFiles int      `json:"partial_files"`
	DryRun       bool     `json:"dry_run"`
}

// GCArtifacts asks the coordinator to remove unreferenced artifacts idle
// for longer than grace.
func (c *Client) GCArtifacts(ctx context.Context, grace time.Duration, dryRun bool) (*GCReport, error) {
	var out GCReport
	body := map[string]any{"grace": grace.String(), "dry_run": dryRun}
	if err := c.doJSON(ctx, http.MethodPost, "/v1/artifacts/gc", nil, body, &out); err != nil {
		return nil, err
	}
	return &out, nil
}
