package api

import (
	"context"
	"log/slog"
	"net/http"

	"github.com/danielgtaylor/huma/v2"

	"github.com/lesfarm/lesfarm/coordinator/store"
)

// seriesHandler serves the time series the regression detector keeps
// (one per suite × config × metric × device model × OS × lineage), for the
// dashboard's "metric by device model over builds" charts.
type seriesHandler struct {
	st  *store.Store
	log *slog.Logger
}

type seriesCatalogInput struct {
	Suite string `query:"suite" maxLength:"100"`
	Limit int    `query:"limit" minimum:"1" maximum:"5000" default:"1000"`
}

type seriesCatalogOutput struct {
	Body struct {
		Items []SeriesFamily `json:"items" doc:"Series families, by suite, lineage, config and metric."`
	}
}

// RegisterCatalog registers GET /v1/series/catalog: which suites,
// configs and metrics have series.
func (h *seriesHandler) RegisterCatalog(api huma.API) {
	huma.Register(api, huma.Operation{
		OperationID: "series-catalog", Method: http.MethodGet, Path: "/v1/series/catalog",
		Summary: "List the available series families", Tags: []string{"results"},
	}, func(ctx context.Context, in *seriesCatalogInput) (*seriesCatalogOutput, error) {
		items, err := h.st.SeriesCatalog(ctx, in.Suite, in.Limit)
		if err != nil {
			return nil, storeErr(ctx, h.log, "series catalog", err)
		}
		out := &seriesCatalogOutput{}
		out.Body.Items = mapSlice(items, familyFromStore)
		return out, nil
	})
}

type seriesInput struct {
	Suite       string `query:"suite" required:"true" minLength:"1" maxLength:"100" example:"les-ladder"`
	Metric      string `query:"metric" required:"true" minLength:"1" maxLength:"200" example:"decode_tps"`
	Config      string `query:"config" maxLength:"500" doc:"Config key; empty means every config."`
	Lineage     string `query:"lineage" maxLength:"200" pattern:"^(\\*|[A-Za-z0-9][A-Za-z0-9._-]*)$" doc:"Build lineage (e.g. a branch); empty or * means every lineage."`
	DeviceModel string `query:"device_model" maxLength:"200"`
	Last        int    `query:"last" minimum:"1" maximum:"1000" default:"100" doc:"How many most recent points per series."`
	Points      int    `query:"points" minimum:"0" maximum:"5000" default:"0" doc:"Downsample to at most this many points per series (0: every point). The builds of all returned series are cut into the same buckets of consecutive builds; a bucket's point sits at its last build and carries the mean, RMS stddev, summed n and min/max of its builds (see bucket)."`
}

type seriesOutput struct {
	Body struct {
		Series []SeriesWithPoints `json:"series" doc:"Matching series with their most recent points."`
	}
}

// RegisterSeries registers GET /v1/series: one metric across device models
// over builds (points ordered by build sequence).
func (h *seriesHandler) RegisterSeries(api huma.API) {
	huma.Register(api, huma.Operation{
		OperationID: "query-series", Method: http.MethodGet, Path: "/v1/series",
		Summary: "Query a metric by device model over builds", Tags: []string{"results"},
		Description: "Returns every matching series (one per device model, OS major, emulation, config and lineage) with its most recent points (the last recorded, by seq) in build order: by the position of their build in the lineage, each with the build's git sha and the sha256 of the executable that ran; each point is one build's mean with its stddev and repetition count, or with points=N a bucket of consecutive builds.",
	}, func(ctx context.Context, in *seriesInput) (*seriesOutput, error) {
		items, err := h.st.QuerySeries(ctx, &store.SeriesQuery{
			Suite: in.Suite, Metric: in.Metric, Config: in.Config, Lineage: lineageFilter(in.Lineage), DeviceModel: in.DeviceModel, Last: in.Last,
		})
		if err != nil {
			return nil, storeErr(ctx, h.log, "series", err)
		}
		out := &seriesOutput{}
		out.Body.Series = mapSlice(store.DownsampleSeries(items, in.Points), seriesWithPointsFromStore)
		return out, nil
	})
}

type resultSeriesInput struct {
	Suite       string `query:"suite" required:"true" minLength:"1" maxLength:"100" example:"les-ladder"`
	Metric      string `query:"metric" required:"true" enum:"decode_tps,decode_tps_median,prefill_tps,ttft_ms,peak_memory_bytes,hit_rate,predictor_recall,stall_fraction,bytes_per_token"`
	Config      string `query:"config" maxLength:"500" doc:"Config key; empty means every config."`
	DeviceModel string `query:"device_model" maxLength:"200"`
	Last        int    `query:"last" minimum:"1" maximum:"1000" default:"100" doc:"How many most recent builds per series."`
}

// RegisterResultSeries registers GET /v1/results/series: the same chart
// data computed straight from the results table, available as soon as runs
// report (it does not need the regression detector's series).
func (h *seriesHandler) RegisterResultSeries(api huma.API) {
	huma.Register(api, huma.Operation{
		OperationID: "query-result-series", Method: http.MethodGet, Path: "/v1/results/series",
		Summary: "Query a metric by device model over builds, from raw results", Tags: []string{"results"},
		Description: "One series per device model, emulation and config; one point per build: the mean over that build's valid results on that model (n = number of runs). Builds are ordered by their first result and seq is that rank.",
	}, func(ctx context.Context, in *resultSeriesInput) (*seriesOutput, error) {
		items, err := h.st.ResultSeries(ctx, &store.SeriesQuery{
			Suite: in.Suite, Metric: in.Metric, Config: in.Config, DeviceModel: in.DeviceModel, Last: in.Last,
		})
		if err != nil {
			return nil, storeErr(ctx, h.log, "result series", err)
		}
		out := &seriesOutput{}
		out.Body.Series = mapSlice(items, seriesWithPointsFromStore)
		return out, nil
	})
}
