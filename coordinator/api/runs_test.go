package api

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/lesfarm/lesfarm/coordinator/builds/buildstest"
	"github.com/lesfarm/lesfarm/coordinator/store"
	"github.com/lesfarm/lesfarm/protocol"
)

func addDevice(t testing.TB, st *store.Store, id, platform, model string, labels map[string]string) {
	t.Helper()
	ram := int64(8 << 30)
	if _, err := st.UpsertDevice(context.Background(), &store.UpsertDeviceParams{
		ID: id, Fingerprint: protocol.Fingerprint{Platform: platform, DeviceModel: model, RAMBytes: &ram},
		Labels: labels, TTL: 15 * time.Second, Coordinator: "test",
	}); err != nil {
		t.Fatal(err)
	}
}

func TestDevices(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	for i := range 5 {
		model := "Pixel 8"
		if i%2 == 1 {
			model = "Galaxy S24"
		}
		addDevice(t, e.st, fmt.Sprintf("dev-%d", i), "android", model, map[string]string{"pool": "ci"})
	}
	page := func(q string) ([]string, string) {
		t.Helper()
		resp := e.api.Get("/v1/devices" + q)
		if resp.Code != http.StatusOK {
			t.Fatalf("%s: %d %s", q, resp.Code, resp.Body)
		}
		var p struct {
			Items      []Device `json:"items"`
			NextCursor string   `json:"next_cursor"`
		}
		json.Unmarshal(resp.Body.Bytes(), &p)
		var ids []string
		for _, d := range p.Items {
			ids = append(ids, d.ID)
		}
		return ids, p.NextCursor
	}
	tests := []struct{ q, want, next string }{
		{"", "[dev-0 dev-1 dev-2 dev-3 dev-4]", ""},
		{"?limit=2", "[dev-0 dev-1]", "dev-1"},
		{"?limit=2&cursor=dev-1", "[dev-2 dev-3]", "dev-3"},
		{"?device_model=Galaxy%20S24", "[dev-1 dev-3]", ""},
		{"?label=pool=ci&platform=android&limit=1", "[dev-0]", "dev-0"},
		{"?label=pool=lab", "[]", ""},
	}
	for _, tc := range tests {
		ids, next := page(tc.q)
		if fmt.Sprint(ids) != tc.want && !(tc.want == "[]" && ids == nil) || next != tc.next {
			t.Errorf("%q: %v next %q; want %s next %q", tc.q, ids, next, tc.want, tc.next)
		}
	}
	if resp := e.api.Get("/v1/devices?label=nonsense"); resp.Code != http.StatusUnprocessableEntity ||
		!decodeProblem(t, resp.Header().Get("Content-Type"), resp.Body.Bytes()).hasLocation("query.label[0]") {
		t.Fatalf("bad label filter: %d %s", resp.Code, resp.Body)
	}
	// Label, drain, undrain.
	resp := e.api.Put("/v1/devices/dev-0/labels", e.auth(), map[string]any{"labels": map[string]string{"pool": "lab", "bad key": "x"}})
	if resp.Code != http.StatusUnprocessableEntity || !decodeProblem(t, resp.Header().Get("Content-Type"), resp.Body.Bytes()).hasLocation("body.labels.bad key") {
		t.Fatalf("bad label: %d %s", resp.Code, resp.Body)
	}
	if resp := e.api.Put("/v1/devices/dev-0/labels", e.auth(), map[string]any{"labels": map[string]string{"pool": "lab"}}); resp.Code != http.StatusOK {
		t.Fatalf("label: %d %s", resp.Code, resp.Body)
	}
	if ids, _ := page("?label=pool=lab"); fmt.Sprint(ids) != "[dev-0]" {
		t.Fatalf("operator label must win over the agent's: %v", ids)
	}
	if resp := e.api.Post("/v1/devices/dev-2/drain"); resp.Code != http.StatusUnauthorized {
		t.Fatalf("drain without token: %d", resp.Code)
	}
	if resp := e.api.Post("/v1/devices/dev-2/drain", e.auth()); resp.Code != http.StatusOK || !strings.Contains(resp.Body.String(), `"drained":true`) {
		t.Fatalf("drain: %d %s", resp.Code, resp.Body)
	}
	if ids, _ := page("?drained=true"); fmt.Sprint(ids) != "[dev-2]" {
		t.Fatalf("drained filter: %v", ids)
	}
	if resp := e.api.Post("/v1/devices/dev-2/undrain", e.auth()); resp.Code != http.StatusOK || !strings.Contains(resp.Body.String(), `"drained":false`) {
		t.Fatalf("undrain: %d %s", resp.Code, resp.Body)
	}
	if resp := e.api.Get("/v1/devices/nope"); resp.Code != http.StatusNotFound {
		t.Fatalf("unknown device: %d", resp.Code)
	}
}

func TestSuitesAndJobValidation(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	// Built-in suites are readable even before being stored.
	resp := e.api.Get("/v1/suites/smoke")
	if resp.Code != http.StatusOK || !strings.Contains(resp.Body.String(), `"builtin":true`) {
		t.Fatalf("builtin suite: %d %s", resp.Code, resp.Body)
	}
	var smoke Suite
	json.Unmarshal(resp.Body.Bytes(), &smoke)
	spec, _ := json.Marshal(smoke.Spec)

	// Validation errors are located at the failing spec field.
	bad := strings.Replace(string(spec), `"on-demand"`, `"lookahed"`, 1)
	resp = e.api.Put("/v1/suites/mine", e.auth(), map[string]any{"spec": json.RawMessage(bad)})
	if resp.Code != http.StatusUnprocessableEntity || !decodeProblem(t, resp.Header().Get("Content-Type"), resp.Body.Bytes()).hasLocation("body.spec.matrix.modes[1]") {
		t.Fatalf("bad mode: %d %s", resp.Code, resp.Body)
	}
	yaml := "name: mine\nmodel:\n  sha256: nothex\n  size: 10\nprompts:\n  inline: [hi]\nmatrix:\n  modes: [resident]\n"
	resp = e.api.Post("/v1/jobs/validate", map[string]any{"spec_text": yaml})
	p := decodeProblem(t, resp.Header().Get("Content-Type"), resp.Body.Bytes())
	if resp.Code != http.StatusUnprocessableEntity || !p.hasLocation("body.spec_text.model.sha256") || !strings.Contains(resp.Body.String(), "line 3") {
		t.Fatalf("yaml validation: %d %s", resp.Code, resp.Body)
	}
	if resp := e.api.Put("/v1/suites/mine", e.auth(), map[string]any{}); resp.Code != http.StatusUnprocessableEntity ||
		!decodeProblem(t, resp.Header().Get("Content-Type"), resp.Body.Bytes()).hasLocation("body.spec") {
		t.Fatalf("missing spec: %d %s", resp.Code, resp.Body)
	}
	// Valid spec: create (201), replace (200), get, list, delete.
	good := strings.Replace(string(spec), `"suite":"smoke"`, `"suite":"mine"`, 1)
	if resp := e.api.Put("/v1/suites/mine", e.auth(), map[string]any{"spec": json.RawMessage(good)}); resp.Code != http.StatusCreated {
		t.Fatalf("create suite: %d %s", resp.Code, resp.Body)
	}
	if resp := e.api.Put("/v1/suites/mine", e.auth(), map[string]any{"spec": json.RawMessage(good)}); resp.Code != http.StatusOK {
		t.Fatalf("replace suite: %d %s", resp.Code, resp.Body)
	}
	if resp := e.api.Put("/v1/suites/other", e.auth(), map[string]any{"spec": json.RawMessage(good)}); resp.Code != http.StatusUnprocessableEntity ||
		!decodeProblem(t, resp.Header().Get("Content-Type"), resp.Body.Bytes()).hasLocation("body.spec.suite") {
		t.Fatalf("suite name mismatch: %d %s", resp.Code, resp.Body)
	}
	if resp := e.api.Get("/v1/suites"); resp.Code != http.StatusOK || !strings.Contains(resp.Body.String(), `"name":"mine"`) {
		t.Fatalf("list suites: %d %s", resp.Code, resp.Body)
	}
	resp = e.api.Post("/v1/jobs/validate", map[string]any{"spec": json.RawMessage(good)})
	if resp.Code != http.StatusOK || !strings.Contains(resp.Body.String(), `"configs":[`) {
		t.Fatalf("validate: %d %s", resp.Code, resp.Body)
	}
	if resp := e.api.Delete("/v1/suites/mine", e.auth()); resp.Code != http.StatusNoContent {
		t.Fatalf("delete suite: %d", resp.Code)
	}
}

func TestRunsTriggerListCancelAndEvents(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	addDevice(t, e.st, "p1", "android", "Pixel 8", nil)
	addDevice(t, e.st, "p2", "android", "Pixel 8", nil)
	buildstest.Register(t, e.st, "b1", "b2", "b3", "b4", "b5", "bw")

	// Validation with locations.
	resp := e.api.Post("/v1/runs", e.auth(), map[string]any{"suite": "smoke", "build": "b1", "override": map[string]any{"modes": []string{"warp"}}})
	if resp.Code != http.StatusUnprocessableEntity || !decodeProblem(t, resp.Header().Get("Content-Type"), resp.Body.Bytes()).hasLocation("body.override.matrix.modes[0]") {
		t.Fatalf("bad override: %d %s", resp.Code, resp.Body)
	}
	resp = e.api.Post("/v1/runs", e.auth(), map[string]any{"suite": "nope", "build": "b1"})
	if resp.Code != http.StatusNotFound || !decodeProblem(t, resp.Header().Get("Content-Type"), resp.Body.Bytes()).hasLocation("body.suite") {
		t.Fatalf("unknown suite: %d %s", resp.Code, resp.Body)
	}
	if resp := e.api.Post("/v1/runs", e.auth(), map[string]any{"suite": "smoke", "build": "b9"}); resp.Code != http.StatusUnprocessableEntity ||
		!decodeProblem(t, resp.Header().Get("Content-Type"), resp.Body.Bytes()).hasLocation("body.build") {
		t.Fatalf("unregistered build: %d %s", resp.Code, resp.Body)
	}
	if resp := e.api.Post("/v1/runs", map[string]any{"suite": "smoke", "build": "b1"}); resp.Code != http.StatusUnauthorized {
		t.Fatalf("trigger without token: %d", resp.Code)
	}
	if resp := e.api.Post("/v1/runs", e.auth(), map[string]any{"suite": "smoke", "build": "b1", "fanout": true, "devices": map[string]any{"device_model": "iPhone 15"}}); resp.Code != http.StatusConflict {
		t.Fatalf("fanout without devices: %d %s", resp.Code, resp.Body)
	}

	// Fanout over both Pixels.
	resp = e.api.Post("/v1/runs", e.auth(), map[string]any{
		"suite": "smoke", "build": "b1", "git_sha": "abc123", "fanout": true,
		"devices":  map[string]any{"platform": "android", "device_model": "Pixel 8"},
		"override": map[string]any{"repetitions": 2},
	})
	if resp.Code != http.StatusCreated {
		t.Fatalf("trigger: %d %s", resp.Code, resp.Body)
	}
	var set RunSet
	json.Unmarshal(resp.Body.Bytes(), &set)
	if len(set.Runs) != 2 || set.Done || set.Trigger.ID == 0 {
		t.Fatalf("trigger result: %+v", set)
	}
	// Four more single runs for pagination.
	for i := range 4 {
		if resp := e.api.Post("/v1/runs", e.auth(), map[string]any{"suite": "smoke", "build": fmt.Sprintf("b%d", i+2)}); resp.Code != http.StatusCreated {
			t.Fatalf("trigger %d: %d", i, resp.Code)
		}
	}
	var all []int64
	cursor := ""
	for range 10 {
		resp := e.api.Get("/v1/runs?limit=4" + cursor)
		var p struct {
			Items      []Run `json:"items"`
			NextCursor int64 `json:"next_cursor"`
		}
		json.Unmarshal(resp.Body.Bytes(), &p)
		for _, r := range p.Items {
			all = append(all, r.ID)
		}
		if p.NextCursor == 0 {
			break
		}
		cursor = fmt.Sprintf("&cursor=%d", p.NextCursor)
	}
	if fmt.Sprint(all) != "[6 5 4 3 2 1]" {
		t.Fatalf("paged runs %v", all)
	}
	if resp := e.api.Get("/v1/runs?state=queued&build=b1"); !strings.Contains(resp.Body.String(), `"id":1`) || strings.Contains(resp.Body.String(), `"id":3`) {
		t.Fatalf("filter: %s", resp.Body)
	}
	resp = e.api.Get("/v1/runs/1")
	if resp.Code != http.StatusOK || !strings.Contains(resp.Body.String(), `"results":[]`) || !strings.Contains(resp.Body.String(), `"repetitions":2`) {
		t.Fatalf("get run: %d %s", resp.Code, resp.Body)
	}

	// Follow the fanout trigger over SSE while cancelling its runs.
	req, _ := http.NewRequest("GET", fmt.Sprintf("%s/v1/runs/events?trigger=%d", e.srv.URL, set.Trigger.ID), nil)
	sresp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer sresp.Body.Close()
	if ct := sresp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "text/event-stream") {
		t.Fatalf("events content type %q", ct)
	}
	events := make(chan string, 100)
	go func() {
		sc := bufio.NewScanner(sresp.Body)
		var ev string
		for sc.Scan() {
			line := sc.Text()
			if v, ok := strings.CutPrefix(line, "event: "); ok {
				ev = v
			}
			if v, ok := strings.CutPrefix(line, "data: "); ok {
				events <- ev + " " + v
			}
		}
		close(events)
	}()
	first := <-events
	if !strings.HasPrefix(first, "run ") || !strings.Contains(first, `"state":"queued"`) {
		t.Fatalf("first event %q", first)
	}
	for _, id := range set.Trigger.RunIDs {
		if resp := e.api.Post(fmt.Sprintf("/v1/runs/%d/cancel", id), e.auth(), map[string]any{"reason": "test"}); resp.Code != http.StatusOK {
			t.Fatalf("cancel: %d %s", resp.Code, resp.Body)
		}
	}
	if resp := e.api.Post(fmt.Sprintf("/v1/runs/%d/cancel", set.Trigger.RunIDs[0]), e.auth()); resp.Code != http.StatusConflict {
		t.Fatalf("second cancel: %d", resp.Code)
	}
	var last string
	timeout := time.After(10 * time.Second)
	for done := false; !done; {
		select {
		case ev, ok := <-events:
			if !ok {
				done = true
				break
			}
			last = ev
		case <-timeout:
			t.Fatal("no done event")
		}
	}
	if !strings.HasPrefix(last, "done ") || !strings.Contains(last, `"cancelled":2`) || !strings.Contains(last, `"succeeded":false`) {
		t.Fatalf("last event %q", last)
	}

	// wait=true returns at once for runs that are already finished, and
	// times out (done=false) for queued ones.
	resp = e.api.Post("/v1/runs?wait=true&wait_timeout=1", e.auth(), map[string]any{"suite": "smoke", "build": "bw"})
	json.Unmarshal(resp.Body.Bytes(), &set)
	if resp.Code != http.StatusCreated || set.Done || len(set.Runs) != 1 || set.Runs[0].State != "queued" {
		t.Fatalf("wait timeout: %d %s", resp.Code, resp.Body)
	}
}
