package api

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/lesfarm/lesfarm/coordinator/builds/buildstest"
)

// TestNULBytesAre422: a NUL byte anywhere a string reaches the database
// (query filters, path, JSON body fields and object keys) is a 422 that
// names the field, never a 500 from PostgreSQL (SQLSTATE 22021).
func TestNULBytesAre422(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	addDevice(t, e.st, "nul-dev", "android", "Pixel 8", nil)
	tests := []struct {
		method, path, body, loc string
	}{
		{"GET", "/v1/runs?build=a%00b", "", "query.build"},
		{"GET", "/v1/runs?suite=smoke&device_id=x%00", "", "query.device_id"},
		{"GET", "/v1/results?config=x%00y", "", "query.config"},
		{"GET", "/v1/devices?label=pool=c%00i", "", "query.label"},
		{"GET", "/v1/alerts?build=%00", "", "query.build"},
		{"POST", "/v1/artifacts?name=m%00.gguf", "", "query.name"},
		{"GET", "/v1/suites/sm%00oke", "", "path"},
		{"POST", "/v1/runs", `{"suite":"smoke","build":"b\u0000"}`, "body.build"},
		{"POST", "/v1/runs", `{"suite":"smoke","build":"b","git_sha":"ok","devices":{"labels":{"pool":"c\u0000i"}}}`, "body.devices.labels.pool"},
		{"PUT", "/v1/devices/nul-dev/labels", `{"labels":{"po\u0000ol":"ci"}}`, "body.labels"},
		{"PATCH", "/v1/alerts/1", `{"status":"acknowledged","note":"seen \u0000 here"}`, "body.note"},
	}
	for _, tc := range tests {
		ct := "application/json"
		if tc.body == "" {
			ct = "application/octet-stream"
		}
		resp := e.do(tc.method, tc.path, strings.NewReader(tc.body), "Authorization", "Bearer "+e.token, "Content-Type", ct)
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		var p struct {
			Errors []struct{ Location, Message string }
		}
		_ = json.Unmarshal(b, &p)
		if resp.StatusCode != http.StatusUnprocessableEntity || len(p.Errors) == 0 || p.Errors[0].Location != tc.loc {
			t.Errorf("%s %s: %d %s; want 422 at %s", tc.method, tc.path, resp.StatusCode, b, tc.loc)
		}
	}
	// A body without NUL still reaches the handler intact.
	buildstest.Register(t, e.st, "clean")
	resp := e.do("POST", "/v1/runs", strings.NewReader(`{"suite":"smoke","build":"clean"}`), "Authorization", "Bearer "+e.token, "Content-Type", "application/json")
	resp.Body.Close()
	if resp.StatusCode != http.StatusCreated {
		t.Fatalf("clean trigger after the NUL checks: %d", resp.StatusCode)
	}
}

// TestValidationErrorDoesNotEchoBody: a 422 for an unknown field names
// it, but does not echo a body of almost a megabyte back.
func TestValidationErrorDoesNotEchoBody(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	body := `{"suite":"smoke","build":"b","junk":"` + strings.Repeat("x", 900<<10) + `"}`
	resp := e.do("POST", "/v1/runs", strings.NewReader(body), "Authorization", "Bearer "+e.token, "Content-Type", "application/json")
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnprocessableEntity || len(b) > 4<<10 || !strings.Contains(string(b), "junk") {
		t.Fatalf("%d, %d bytes: %.300s; want a short 422 naming junk", resp.StatusCode, len(b), b)
	}
}
