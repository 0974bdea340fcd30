package api

import (
	"context"
	"net/http"

	"github.com/danielgtaylor/huma/v2"
)

type lineagesOutput struct {
	Body struct {
		Items []Lineage `json:"items" doc:"Lineages, main first, then by name."`
	}
}

// RegisterLineages registers GET /v1/lineages: every build lineage with its
// runs, series and untriaged regressions, for lineage pickers.
func (h *seriesHandler) RegisterLineages(api huma.API) {
	huma.Register(api, huma.Operation{
		OperationID: "list-lineages", Method: http.MethodGet, Path: "/v1/lineages",
		Summary: "List the build lineages", Tags: []string{"results"},
		Description: "Every build lineage seen in runs, schedules, regression series or alert groups, main first, with its run count, newest run, series count and regressions awaiting triage.",
	}, func(ctx context.Context, _ *struct{}) (*lineagesOutput, error) {
		items, err := h.st.Lineages(ctx)
		if err != nil {
			return nil, storeErr(ctx, h.log, "lineages", err)
		}
		out := &lineagesOutput{}
		out.Body.Items = mapSlice(items, lineageFromStore)
		return out, nil
	})
}
