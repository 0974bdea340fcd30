package api

import (
	"context"
	"log/slog"
	"net/http"

	"github.com/danielgtaylor/huma/v2"

	"github.com/lesfarm/lesfarm/coordinator/store"
)

// drilldownHandler serves the inside of one run config: its per-token
// decode timeline and its per-layer expert counts, from the samples the
// agent streamed. Both are computed in Postgres or while reading, so a long
// run answers with a bounded document.
type drilldownHandler struct {
	st  *store.Store
	log *slog.Logger
}

type configInput struct {
	ID     int64 `path:"id" minimum:"1" doc:"Run id."`
	Config int   `path:"config" minimum:"0" maximum:"4095" doc:"Config index of the run (its results' config_index)."`
}

type timelineInput struct {
	ID     int64 `path:"id" minimum:"1" doc:"Run id."`
	Config int   `path:"config" minimum:"0" maximum:"4095" doc:"Config index of the run (its results' config_index)."`
	Points int   `query:"points" minimum:"1" maximum:"5000" default:"600" doc:"Largest number of points to return; consecutive steps are summed into buckets when the run has more."`
}

// TimelinePoint is one bucket of consecutive measured decode steps.
type TimelinePoint struct {
	Index      int   `json:"index" doc:"First decode step of the bucket, counted over the config's measured repetitions from 0." example:"0"`
	Steps      int   `json:"steps" doc:"Decode steps in the bucket (1 unless the run was downsampled)." example:"1"`
	Repetition int   `json:"repetition" doc:"Repetition of the bucket's first step (0-based; warm-up is left out)." example:"0"`
	Step       int   `json:"step" doc:"Step number of the bucket's first step within its repetition." example:"0"`
	Tokens     int64 `json:"tokens" doc:"Tokens the bucket produced." example:"1"`
	// Per token, over the bucket.
	MSPerToken      float64 `json:"ms_per_token" doc:"Device time per token (duration ÷ tokens), ms." example:"71.4"`
	StallMSPerToken float64 `json:"stall_ms_per_token" doc:"Time per token spent waiting for expert reads, ms." example:"8.6"`
	BytesPerToken   float64 `json:"bytes_per_token" doc:"Expert bytes read per token." example:"50331648"`
	HitRate         float64 `json:"hit_rate" doc:"Selected experts resident when demanded ÷ selected experts." example:"0.87"`
	CacheBytes      int64   `json:"cache_bytes" doc:"Largest expert-cache size in the bucket, bytes." example:"1073741824"`
}

// Timeline is a run config's decode timeline.
type Timeline struct {
	RunID       int64           `json:"run_id" doc:"Run id." example:"4812"`
	ConfigIndex int             `json:"config_index" doc:"Config index within the run." example:"0"`
	StepsTotal  int             `json:"steps_total" doc:"Measured decode steps before downsampling." example:"512"`
	Points      []TimelinePoint `json:"points" doc:"Buckets of consecutive decode steps, in the order the device produced them."`
}

type timelineOutput struct{ Body *Timeline }

// LayerStats are one layer's expert counts over a config's measured decode
// steps, and the rates derived from them.
type LayerStats struct {
	Layer          int   `json:"layer" doc:"Layer index (0-based)." example:"0"`
	Hits           int64 `json:"hits" doc:"Selected experts that were resident when demanded." example:"10240"`
	Misses         int64 `json:"misses" doc:"Selected experts read on demand." example:"1536"`
	PrefetchUsed   int64 `json:"prefetch_used" doc:"Prefetched experts that were then selected." example:"980"`
	PrefetchWasted int64 `json:"prefetch_wasted" doc:"Prefetched experts that were not selected." example:"410"`
	// Rates; 0 when their denominator is 0.
	HitRate           float64 `json:"hit_rate" doc:"hits ÷ (hits + misses)." example:"0.87"`
	PrefetchPrecision float64 `json:"prefetch_precision" doc:"prefetch_used ÷ (prefetch_used + prefetch_wasted): of what the predictor fetched, the share that was used." example:"0.705"`
	PrefetchRecall    float64 `json:"prefetch_recall" doc:"prefetch_used ÷ (prefetch_used + misses): of the demanded experts that were not already cached, the share the predictor fetched in time." example:"0.389"`
}

// LayerBreakdown is a run config's per-layer table.
type LayerBreakdown struct {
	RunID       int64        `json:"run_id" doc:"Run id." example:"4812"`
	ConfigIndex int          `json:"config_index" doc:"Config index within the run." example:"0"`
	Steps       int          `json:"steps" doc:"Measured decode steps that carried per-layer counts." example:"1"`
	Layers      []LayerStats `json:"layers" doc:"One row per layer, by layer index."`
}

type layersOutput struct{ Body *LayerBreakdown }

func ratio(a, b int64) float64 {
	if b == 0 {
		return 0
	}
	return float64(a) / float64(b)
}

// RegisterTimeline registers GET /v1/runs/{id}/configs/{config}/timeline.
func (h *drilldownHandler) RegisterTimeline(api huma.API) {
	huma.Register(api, huma.Operation{
		OperationID: "run-config-timeline", Method: http.MethodGet, Path: "/v1/runs/{id}/configs/{config}/timeline",
		Summary: "Per-token decode timeline of one config of a run", Tags: []string{"runs"},
		Description: "The measured decode steps of the config (warm-up and prefill left out), in the order the device produced them, with stall, bytes and hit rate per token. Downsampled on the server to at most `points` buckets of consecutive steps.",
	}, func(ctx context.Context, in *timelineInput) (*timelineOutput, error) {
		if _, err := h.st.GetRun(ctx, in.ID); err != nil {
			return nil, storeErr(ctx, h.log, "run", err)
		}
		pts, total, err := h.st.Timeline(ctx, in.ID, in.Config, in.Points)
		if err != nil {
			return nil, storeErr(ctx, h.log, "timeline", err)
		}
		out := &Timeline{RunID: in.ID, ConfigIndex: in.Config, StepsTotal: total, Points: make([]TimelinePoint, 0, len(pts))}
		for _, p := range pts {
			tok := max(p.Tokens, 1)
			out.Points = append(out.Points, TimelinePoint{Index: p.Index, Steps: p.Steps, Repetition: p.Repetition, Step: p.Step, Tokens: p.Tokens,
				MSPerToken: float64(p.DurationNS) / 1e6 / float64(tok), StallMSPerToken: float64(p.StallNS) / 1e6 / float64(tok),
				BytesPerToken: float64(p.BytesRead) / float64(tok), HitRate: ratio(p.Hits, p.Hits+p.Misses), CacheBytes: p.CacheBytes})
		}
		return &timelineOutput{Body: out}, nil
	})
}

// RegisterLayers registers GET /v1/runs/{id}/configs/{config}/layers.
func (h *drilldownHandler) RegisterLayers(api huma.API) {
	huma.Register(api, huma.Operation{
		OperationID: "run-config-layers", Method: http.MethodGet, Path: "/v1/runs/{id}/configs/{config}/layers",
		Summary: "Per-layer hit rate and predictor precision and recall of one config of a run", Tags: []string{"runs"},
		Description: "Expert counts per layer summed over the config's measured decode steps, with hit rate, prefetch precision and prefetch recall.",
	}, func(ctx context.Context, in *configInput) (*layersOutput, error) {
		if _, err := h.st.GetRun(ctx, in.ID); err != nil {
			return nil, storeErr(ctx, h.log, "run", err)
		}
		lt, steps, err := h.st.LayerTotals(ctx, in.ID, in.Config)
		if err != nil {
			return nil, storeErr(ctx, h.log, "layers", err)
		}
		out := &LayerBreakdown{RunID: in.ID, ConfigIndex: in.Config, Steps: steps, Layers: make([]LayerStats, 0, len(lt))}
		for _, l := range lt {
			out.Layers = append(out.Layers, LayerStats{Layer: l.Layer, Hits: l.Hits, Misses: l.Misses, PrefetchUsed: l.PrefetchUsed, PrefetchWasted: l.PrefetchWasted,
				HitRate: ratio(l.Hits, l.Hits+l.Misses), PrefetchPrecision: ratio(l.PrefetchUsed, l.PrefetchUsed+l.PrefetchWasted),
				PrefetchRecall: ratio(l.PrefetchUsed, l.PrefetchUsed+l.Misses)})
		}
		return &layersOutput{Body: out}, nil
	})
}
