package api

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"testing"
)

func TestAlerts(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := context.Background()
	for i := range 5 {
		build := "b1"
		if i >= 3 {
			build = "b2"
		}
		if _, err := e.st.Pool().Exec(ctx, `INSERT INTO alert_groups (suite, lineage, seq, build, scope, summary, regression)
			VALUES ('les-ladder', 'main', $1, $2, 'global', 'decode_tps -8%', $3)`, i, build, i%2 == 0); err != nil {
			t.Fatal(err)
		}
	}
	list := func(q string) (ids []int64, next int64) {
		t.Helper()
		resp := e.api.Get("/v1/alerts" + q)
		if resp.Code != http.StatusOK {
			t.Fatalf("list %s: %d %s", q, resp.Code, resp.Body)
		}
		var page struct {
			Items      []AlertGroup `json:"items"`
			NextCursor int64        `json:"next_cursor"`
		}
		json.Unmarshal(resp.Body.Bytes(), &page)
		for _, g := range page.Items {
			ids = append(ids, g.ID)
		}
		return ids, page.NextCursor
	}
	tests := []struct {
		q    string
		want string
		next int64
	}{
		{"", "[5 4 3 2 1]", 0},
		{"?limit=2", "[5 4]", 4},
		{"?limit=2&cursor=4", "[3 2]", 2},
		{"?build=b2", "[5 4]", 0},
		{"?build=b1&limit=1", "[3]", 3},
		{"?regression=true", "[5 3 1]", 0},
	}
	for _, tc := range tests {
		ids, next := list(tc.q)
		if fmt.Sprint(ids) != tc.want || next != tc.next {
			t.Errorf("%q: ids %v next %d, want %s next %d", tc.q, ids, next, tc.want, tc.next)
		}
	}
	// Triage: reassigned needs a build; then acknowledge.
	resp := e.api.Patch("/v1/alerts/1", e.auth(), map[string]any{"status": "reassigned"})
	if resp.Code != http.StatusUnprocessableEntity || !decodeProblem(t, resp.Header().Get("Content-Type"), resp.Body.Bytes()).hasLocation("body.reassigned_to") {
		t.Fatalf("reassigned without build: %d %s", resp.Code, resp.Body)
	}
	resp = e.api.Patch("/v1/alerts/1", e.auth(), map[string]any{"status": "bogus"})
	if resp.Code != http.StatusUnprocessableEntity || !decodeProblem(t, resp.Header().Get("Content-Type"), resp.Body.Bytes()).hasLocation("body.status") {
		t.Fatalf("bad status: %d %s", resp.Code, resp.Body)
	}
	if resp := e.api.Patch("/v1/alerts/1", map[string]any{"status": "acknowledged"}); resp.Code != http.StatusUnauthorized {
		t.Fatalf("triage without token: %d", resp.Code)
	}
	resp = e.api.Patch("/v1/alerts/1", e.auth(), map[string]any{"status": "acknowledged", "note": "known"})
	if resp.Code != http.StatusOK {
		t.Fatalf("triage: %d %s", resp.Code, resp.Body)
	}
	if resp := e.api.Get("/v1/alerts/1"); resp.Code != http.StatusOK || !json.Valid(resp.Body.Bytes()) {
		t.Fatalf("get: %d", resp.Code)
	}
	if resp := e.api.Get("/v1/alerts/99"); resp.Code != http.StatusNotFound {
		t.Fatalf("get unknown: %d", resp.Code)
	}
	if ids, _ := list("?status=acknowledged"); fmt.Sprint(ids) != "[1]" {
		t.Fatalf("acknowledged: %v", ids)
	}
}
