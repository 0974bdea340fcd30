package api

import (
	"encoding/json"
	"math"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/lesfarm/lesfarm/coordinator/artifact"
	"github.com/lesfarm/lesfarm/coordinator/builds/buildstest"
	"github.com/lesfarm/lesfarm/coordinator/store"
)

// TestFromStoreWire: the store rows convert to the wire types with the
// field names and value encodings of the contract, durations as Go
// duration strings, empty lists and maps as [] and {}.
func TestFromStoreWire(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 12, 1, 14, 0, 0, 0, time.UTC)
	tests := []struct {
		name string
		v    any
		want []string // substrings of the JSON
		not  []string // must not appear
	}{
		{"run timeout", runFromStore(&store.Run{ID: 7, State: store.RunQueued, Timeout: 30 * time.Minute, CreatedAt: at}),
			[]string{`"id":7`, `"timeout":"30m0s"`, `"state":"queued"`, `"device_selector":{`}, []string{`"timeout":1800`}},
		{"run zero timeout", runFromStore(&store.Run{}), []string{`"timeout":"0s"`}, nil},
		{"run list nil", runsFromStore(nil), []string{`[]`}, []string{`null`}},
		{"trigger run ids nil", triggerFromStore(&store.Trigger{ID: 3}), []string{`"run_ids":[]`}, nil},
		{"nil trigger", triggerFromStore(nil), []string{`null`}, nil},
		{"device ttl and labels", deviceFromStore(&store.Device{ID: "p1", TTL: 15 * time.Second}),
			[]string{`"ttl":"15s"`, `"labels":{}`, `"agent_labels":{}`}, []string{`"ttl":15`}},
		{"device labels kept", deviceFromStore(&store.Device{Labels: map[string]string{"pool": "ci"}}), []string{`"labels":{"pool":"ci"}`}, nil},
		{"schedule catchup", scheduleFromStore(&store.Schedule{ID: 1, CatchupSeconds: 5400}),
			[]string{`"catchup":"1h30m0s"`, `"device_selector":null`}, []string{`catchup_seconds`}},
		{"schedule selector", scheduleFromStore(&store.Schedule{DeviceSelector: json.RawMessage(`{"platform":"android"}`)}),
			[]string{`"device_selector":{"platform":"android"}`}, nil},
		{"firing run ids nil", firingFromStore(&store.ScheduleFiring{Outcome: store.FiringSkipped}), []string{`"run_ids":[]`, `"outcome":"skipped"`}, nil},
		{"alert infinite change", alertFromStore(&store.Alert{RelativeChange: store.Ratio(math.Inf(1))}), []string{`"relative_change":null`}, nil},
		{"alert finite change", alertFromStore(&store.Alert{RelativeChange: -0.25}), []string{`"relative_change":-0.25`}, nil},
		{"group alerts omitted", alertGroupFromStore(&store.AlertGroup{ID: 2}), []string{`"id":2`}, []string{`"alerts"`}},
		{"group alerts", alertGroupFromStore(&store.AlertGroup{Alerts: []store.Alert{{ID: 9, Series: store.RegressSeries{Metric: "decode_tps"}}}}),
			[]string{`"alerts":[{"id":9`, `"metric":"decode_tps"`}, nil},
		{"series points", seriesWithPointsFromStore(&store.SeriesWithPoints{RegressSeries: store.RegressSeries{ID: 4}, Points: []store.RegressPoint{{SeriesID: 4, Seq: 2, Value: 1.5, RunKey: "r"}}}),
			[]string{`"id":4`, `"points":[{"seq":2,"run":"r","value":1.5}]`}, []string{`series_id`}},
		{"series bucket", seriesWithPointsFromStore(&store.SeriesWithPoints{Points: []store.RegressPoint{{Seq: 9, Value: 2, Bucket: &store.PointBucket{SeqFirst: 5, Builds: 4, Min: 1, Max: 3}}}}),
			[]string{`"bucket":{"seq_first":5,"builds":4,"min":1,"max":3}`}, nil},
		{"series no points", seriesWithPointsFromStore(&store.SeriesWithPoints{}), []string{`"points":[]`}, nil},
		{"family", familyFromStore(&store.SeriesKey{Suite: "s", Devices: 3}), []string{`"suite":"s"`, `"devices":3`}, nil},
		{"lineage", lineageFromStore(&store.LineageSummary{Lineage: "main", Runs: 2}), []string{`"lineage":"main"`, `"runs":2`}, []string{`last_run_at`}},
		{"result stat", resultFromStore(&store.Result{RunID: 1, DecodeTPS: store.Stat{Mean: 14, N: 3}, Recall: 0.5}),
			[]string{`"decode_tps":{"mean":14,"median":0,"stddev":0,"n":3}`, `"predictor_recall":0.5`}, nil},
		{"suite", suiteFromStore(&store.Suite{Name: "smoke", Builtin: true}), []string{`"name":"smoke"`, `"builtin":true`}, nil},
		{"artifact", artifactFromStore(&store.Artifact{SHA256: "ab", Size: 5}), []string{`"sha256":"ab"`, `"size":5`}, []string{`"model"`}},
		{"gc report nil lists", gcReportFromArtifact(&artifact.GCReport{FreedBytes: 4}), []string{`"removed":[]`, `"stray_files":[]`, `"freed_bytes":4`}, nil},
		{"profile", profileFromStore(&store.DeviceProfile{DeviceID: "p1", YAML: "name: x\n"}), []string{`"device_id":"p1"`, `"yaml":"name: x\n"`}, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			b, err := json.Marshal(tc.v)
			if err != nil {
				t.Fatal(err)
			}
			for _, w := range tc.want {
				if !strings.Contains(string(b), w) {
					t.Errorf("%s lacks %s", b, w)
				}
			}
			for _, n := range tc.not {
				if strings.Contains(string(b), n) {
					t.Errorf("%s has %s", b, n)
				}
			}
		})
	}
}

// TestWaitTimeoutParam: wait_timeout takes a Go duration string or, as it
// always did, a number of seconds; anything else, or a value outside 1s to
// 6h, is a 422 at query.wait_timeout.
func TestWaitTimeoutParam(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in   string
		want time.Duration
		ok   bool
	}{
		{"", time.Hour, true},
		{"90", 90 * time.Second, true},
		{"90s", 90 * time.Second, true},
		{"1h30m", 90 * time.Minute, true},
		{"6h", 6 * time.Hour, true},
		{"0", 0, false},
		{"500ms", 0, false},
		{"7h", 0, false},
		{"-5s", 0, false},
		{"soon", 0, false},
	}
	for _, tc := range tests {
		got, err := waitTimeout(tc.in)
		if tc.ok != (err == nil) || got != tc.want {
			t.Errorf("waitTimeout(%q) = %v, %v; want %v, ok %v", tc.in, got, err, tc.want, tc.ok)
		}
		if err != nil && !strings.Contains(err.Error(), "validation failed") {
			t.Errorf("waitTimeout(%q): %v, want a validation problem", tc.in, err)
		}
	}
}

// TestDurationsOnTheWire: the served documents carry durations as strings
// (a run's timeout, a device's ttl, a schedule's catch-up window), and a
// schedule accepts catchup as a duration string or the deprecated
// catchup_seconds.
func TestDurationsOnTheWire(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	addDevice(t, e.st, "wire-1", "android", "Pixel 8", nil)
	buildstest.Register(t, e.st, "wire")
	resp := e.api.Post("/v1/runs?wait_timeout=30s", e.auth(), map[string]any{"suite": "smoke", "build": "wire", "override": map[string]any{"timeout": "7m"}})
	if resp.Code != http.StatusCreated {
		t.Fatalf("trigger: %d %s", resp.Code, resp.Body)
	}
	if !strings.Contains(resp.Body.String(), `"timeout":"7m0s"`) {
		t.Fatalf("trigger answer lacks the run timeout as a string: %s", resp.Body)
	}
	var set RunSet
	if err := json.Unmarshal(resp.Body.Bytes(), &set); err != nil || len(set.Runs) != 1 {
		t.Fatalf("trigger answer: %v %s", err, resp.Body)
	}
	for _, path := range []string{"/v1/runs/" + jsonInt(set.Runs[0].ID), "/v1/runs?build=wire"} {
		if r := e.api.Get(path); r.Code != http.StatusOK || !strings.Contains(r.Body.String(), `"timeout":"7m0s"`) {
			t.Errorf("%s: %d %s", path, r.Code, r.Body)
		}
	}
	if r := e.api.Get("/v1/devices/wire-1"); r.Code != http.StatusOK || !strings.Contains(r.Body.String(), `"ttl":"15s"`) {
		t.Errorf("device: %d %s", r.Code, r.Body)
	}
	if r := e.api.Post("/v1/runs?wait_timeout=soon", e.auth(), map[string]any{"suite": "smoke", "build": "wire"}); r.Code != http.StatusUnprocessableEntity ||
		!decodeProblem(t, r.Header().Get("Content-Type"), r.Body.Bytes()).hasLocation("query.wait_timeout") {
		t.Errorf("wait_timeout=soon: %d %s", r.Code, r.Body)
	}
	for _, tc := range []struct {
		name string
		body map[string]any
		want string
	}{
		{"default", map[string]any{}, `"catchup":"1h0m0s"`},
		{"duration", map[string]any{"catchup": "90m"}, `"catchup":"1h30m0s"`},
		{"seconds string", map[string]any{"catchup": "600"}, `"catchup":"10m0s"`},
		{"deprecated seconds", map[string]any{"catchup_seconds": 120}, `"catchup":"2m0s"`},
		{"both catchup wins", map[string]any{"catchup": "5m", "catchup_seconds": 120}, `"catchup":"5m0s"`},
	} {
		body := map[string]any{"name": "wire-" + strings.ReplaceAll(tc.name, " ", "-"), "cron": "@daily", "suite": "smoke"}
		for k, v := range tc.body {
			body[k] = v
		}
		r := e.api.Post("/v1/schedules", e.auth(), body)
		if r.Code != http.StatusCreated || !strings.Contains(r.Body.String(), tc.want) || strings.Contains(r.Body.String(), "catchup_seconds") {
			t.Errorf("%s: %d %s; want %s", tc.name, r.Code, r.Body, tc.want)
		}
	}
}

func jsonInt(v int64) string {
	b, _ := json.Marshal(v)
	return string(b)
}
