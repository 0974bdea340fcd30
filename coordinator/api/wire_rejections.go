package api

import (
	"context"
	"time"

	"github.com/lesfarm/lesfarm/coordinator/store"
)

// DeviceRejections counts the device's messages that ingest refused: a
// message id naming another device, values outside physical ranges, a
// config its run does not have, a telemetry batch re-sent with other
// content (docs/security.md). A device that keeps sending such messages is
// quarantined: drained, with drain_reason saying why.
type DeviceRejections struct {
	Total    int64      `json:"total" doc:"Messages of the device rejected at ingest, ever." example:"3"`
	InWindow int        `json:"in_window" doc:"Rejections in the current quarantine window." example:"3"`
	Last     string     `json:"last,omitempty" doc:"Why the latest one was rejected." example:"configs[0].decode_tps.mean 1e+308 out of range [0, 1e+07]"`
	LastAt   *time.Time `json:"last_at,omitempty" doc:"When the latest one was rejected." example:"2026-12-01T14:00:00Z"`
}

// withRejections adds the device's rejection record to d (GET
// /v1/devices/{id}); a database error leaves it out.
func withRejections(ctx context.Context, st *store.Store, d *Device) {
	r, err := st.GetDeviceRejections(ctx, d.ID)
	if err != nil {
		return
	}
	d.Rejections = &DeviceRejections{Total: r.Total, InWindow: r.InWindow, Last: r.Last, LastAt: r.LastAt}
	d.DrainReason = r.DrainReason
}
