package api

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/lesfarm/lesfarm/coordinator/store"
	"github.com/lesfarm/lesfarm/jobs"
	"github.com/lesfarm/lesfarm/protocol"
)

// TestDeviceShowsRejections: GET /v1/devices/{id} shows how many of the
// device's messages ingest rejected, the last reason, and why quarantine
// drained it (issue 29, finding 2).
func TestDeviceShowsRejections(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := context.Background()
	if _, err := e.st.UpsertDevice(ctx, &store.UpsertDeviceParams{ID: "liar", TTL: time.Minute, Fingerprint: protocol.Fingerprint{Platform: "linux"}}); err != nil {
		t.Fatal(err)
	}
	rs := []store.Rejection{{DeviceID: "liar", Reason: "junk"}, {DeviceID: "liar", Reason: "configs[0].decode_tps.mean 1e+308 out of range"}}
	if _, err := e.st.RecordRejections(ctx, &store.RecordRejectionsParams{Rejections: rs, QuarantineAfter: 2}); err != nil {
		t.Fatal(err)
	}
	resp := e.api.Get("/v1/devices/liar")
	var d Device
	if err := json.Unmarshal(resp.Body.Bytes(), &d); err != nil || d.Rejections == nil {
		t.Fatalf("%d %s: %v", resp.Code, resp.Body, err)
	}
	if d.Rejections.Total != 2 || d.Rejections.Last != rs[1].Reason || !d.Drained || d.DrainReason == "" {
		t.Fatalf("device %+v, rejections %+v", d, d.Rejections)
	}
}

// TestRunTokenHiddenFromAnonymousReaders: a leased run's fencing token is
// in GET /v1/runs/{id} and GET /v1/runs only for a request with a valid
// API token (issue 29, finding 1: tokens are sequential, and with the run
// id they made another device's message ids predictable).
func TestRunTokenHiddenFromAnonymousReaders(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := context.Background()
	ram := int64(8 << 30)
	if _, err := e.st.UpsertDevice(ctx, &store.UpsertDeviceParams{ID: "dev-1", TTL: time.Minute, Fingerprint: protocol.Fingerprint{Platform: "linux", RAMBytes: &ram}}); err != nil {
		t.Fatal(err)
	}
	spec, _ := jobs.Builtin("smoke")
	_, runs, err := e.st.CreateRuns(ctx, &store.CreateRunsParams{Spec: spec})
	if err != nil {
		t.Fatal(err)
	}
	g, err := e.st.ClaimRun(ctx, &store.ClaimRunParams{DeviceID: "dev-1", RunIDs: []int64{runs[0].ID}, LeaseTTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	path := fmt.Sprintf("/v1/runs/%d", g.Run.ID)
	for _, c := range []struct {
		name string
		hdr  []any
		want int64
	}{
		{"anonymous", nil, 0},
		{"invalid token", []any{"Authorization: Bearer nope"}, 0},
		{"API token", []any{e.auth()}, g.Token},
	} {
		var d RunDetail
		resp := e.api.Get(path, c.hdr...)
		if err := json.Unmarshal(resp.Body.Bytes(), &d); err != nil || resp.Code != 200 {
			t.Fatalf("%s: %d %s", c.name, resp.Code, resp.Body)
		}
		var list struct {
			Items []Run `json:"items"`
		}
		resp = e.api.Get("/v1/runs", c.hdr...)
		if err := json.Unmarshal(resp.Body.Bytes(), &list); err != nil || len(list.Items) != 1 {
			t.Fatalf("%s: list %d %s", c.name, resp.Code, resp.Body)
		}
		if d.Run.Token != c.want || list.Items[0].Token != c.want {
			t.Errorf("%s: token %d in the run, %d in the list; want %d", c.name, d.Run.Token, list.Items[0].Token, c.want)
		}
	}
}

// TestRunShowsTelemetryCounts: GET /v1/runs/{id} shows the telemetry the
// attempt's result says was sent next to what is stored (issue 29,
// finding 7).
func TestRunShowsTelemetryCounts(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := context.Background()
	ram := int64(8 << 30)
	if _, err := e.st.UpsertDevice(ctx, &store.UpsertDeviceParams{ID: "dev-1", TTL: time.Minute, Fingerprint: protocol.Fingerprint{Platform: "linux", RAMBytes: &ram}}); err != nil {
		t.Fatal(err)
	}
	spec, _ := jobs.Builtin("smoke")
	_, runs, err := e.st.CreateRuns(ctx, &store.CreateRunsParams{Spec: spec})
	if err != nil {
		t.Fatal(err)
	}
	g, err := e.st.ClaimRun(ctx, &store.ClaimRunParams{DeviceID: "dev-1", RunIDs: []int64{runs[0].ID}, LeaseTTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	b := &protocol.TelemetryBatch{RunID: g.Run.ID, Token: g.Token, DeviceID: "dev-1", Seq: 0}
	for k := range 3 {
		b.Samples = append(b.Samples, protocol.Sample{Step: k, Phase: protocol.PhaseDecode, Tokens: 1})
	}
	if _, err := e.st.InsertTelemetry(ctx, []*protocol.TelemetryBatch{b}); err != nil {
		t.Fatal(err)
	}
	if err := e.st.RecordTelemetrySent(ctx, []store.TelemetrySent{{RunID: g.Run.ID, Token: g.Token, Batches: 2, Samples: 8}}); err != nil {
		t.Fatal(err)
	}
	resp := e.api.Get(fmt.Sprintf("/v1/runs/%d", g.Run.ID))
	var d RunDetail
	if err := json.Unmarshal(resp.Body.Bytes(), &d); err != nil || d.Telemetry == nil {
		t.Fatalf("%d %s", resp.Code, resp.Body)
	}
	if got := *d.Telemetry; got != (RunTelemetry{Reported: true, BatchesSent: 2, SamplesSent: 8, BatchesStored: 1, SamplesStored: 3}) {
		t.Fatalf("telemetry %+v", got)
	}
}
