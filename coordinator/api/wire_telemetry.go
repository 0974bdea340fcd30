package api

import (
	"context"

	"github.com/lesfarm/lesfarm/coordinator/store"
)

// RunTelemetry is a run attempt's telemetry accounting: what its result
// says the agent sent, and what the coordinator stored. A succeeded run
// goes green only once the stored samples reach the sent ones (when the
// agent dropped none); past the wait the attempt fails as infrastructure
// (issue 29, finding 7).
type RunTelemetry struct {
	Reported      bool  `json:"reported" doc:"Whether a result of the current attempt arrived; the sent counts are zero until then." example:"true"`
	BatchesSent   int64 `json:"batches_sent" doc:"Telemetry batches the agent produced, as its result says." example:"40"`
	SamplesSent   int64 `json:"samples_sent" doc:"Telemetry samples the agent produced, as its result says." example:"2000"`
	Dropped       int64 `json:"dropped,omitempty" doc:"Telemetry records the agent dropped (its bounded buffer was full)." example:"0"`
	BatchesStored int64 `json:"batches_stored" doc:"Batches with samples stored for the run." example:"40"`
	SamplesStored int64 `json:"samples_stored" doc:"Samples stored for the run." example:"2000"`
	Complete      bool  `json:"complete" doc:"Every sample the agent sent, and did not drop, is stored." example:"true"`
}

// telemetryOf returns the accounting of r's current attempt; nil when r
// was never leased or the database cannot say.
func telemetryOf(ctx context.Context, st *store.Store, r *store.Run) *RunTelemetry {
	if r.Token == 0 {
		return nil
	}
	t, err := st.GetRunTelemetry(ctx, r.ID, r.Token)
	if err != nil {
		return nil
	}
	return &RunTelemetry{Reported: t.Reported, BatchesSent: t.BatchesSent, SamplesSent: t.SamplesSent, Dropped: t.Dropped,
		BatchesStored: t.BatchesStored, SamplesStored: t.SamplesStored,
		Complete: t.Reported && t.Dropped == 0 && t.SamplesStored >= t.SamplesSent}
}
