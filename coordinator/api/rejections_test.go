package api

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/lesfarm/lesfarm/coordinator/store"
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
