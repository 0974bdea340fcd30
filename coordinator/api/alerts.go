package api

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"time"

	"github.com/danielgtaylor/huma/v2"

	"github.com/lesfarm/lesfarm/coordinator/store"
)

// alertHandler serves regression alerts (filled by coordinator/regress)
// under /v1/alerts. An alert group gathers the change points of one suite
// and build lineage at about one build, across devices and metrics.
type alertHandler struct {
	st  *store.Store
	log *slog.Logger
}

type listAlertsInput struct {
	Suite        string    `query:"suite" maxLength:"100"`
	Build        string    `query:"build" maxLength:"200" doc:"Only groups at this build id (CI uses it to learn whether its build regressed)."`
	Lineage      string    `query:"lineage" maxLength:"200" pattern:"^(\\*|[A-Za-z0-9][A-Za-z0-9._-]*)$" example:"release-3" doc:"Only groups of this build lineage (e.g. a branch); empty or * means every lineage."`
	Status       string    `query:"status" enum:"new,acknowledged,invalid,fixed,reassigned"`
	Scope        string    `query:"scope" enum:"device,platform,global"`
	DeviceModel  string    `query:"device_model" maxLength:"200"`
	Metric       string    `query:"metric" maxLength:"200" example:"decode_tps"`
	Regression   string    `query:"regression" enum:"true,false" doc:"true: regressions only; false: improvements only."`
	Confirmation string    `query:"confirmation" enum:"none,pending,confirmed,refuted"`
	Since        time.Time `query:"since" doc:"Only groups created at or after this time (RFC 3339)."`
	Cursor       int64     `query:"cursor" minimum:"0" doc:"next_cursor of the previous page."`
	Limit        int       `query:"limit" minimum:"1" maximum:"500" default:"50"`
}

type listAlertsOutput struct {
	Body struct {
		Items      []AlertGroup `json:"items" doc:"Alert groups, newest first, without their alerts."`
		NextCursor int64        `json:"next_cursor,omitempty" doc:"Pass as cursor to get the next page; absent on the last page." example:"20"`
	}
}

// RegisterList registers GET /v1/alerts: alert groups, newest first.
func (h *alertHandler) RegisterList(api huma.API) {
	huma.Register(api, huma.Operation{
		OperationID: "list-alerts", Method: http.MethodGet, Path: "/v1/alerts",
		Summary: "List regression alert groups", Tags: []string{"alerts"},
		Description: "Alert groups, newest first, without their alerts (GET /v1/alerts/{id} has them). Paginate with cursor.",
	}, func(ctx context.Context, in *listAlertsInput) (*listAlertsOutput, error) {
		var items []store.AlertGroup
		var err error
		if in.Build != "" {
			items, err = h.st.AlertGroupsForBuild(ctx, in.Suite, lineageFilter(in.Lineage), in.Build, in.Cursor, in.Limit+1)
		} else {
			p := &store.ListAlertGroupsParams{
				Suite: in.Suite, Lineage: lineageFilter(in.Lineage), Status: in.Status, Scope: in.Scope, DeviceModel: in.DeviceModel, Metric: in.Metric,
				Confirmation: in.Confirmation, Since: in.Since, Limit: in.Limit + 1, BeforeID: in.Cursor,
			}
			if in.Regression != "" {
				r := in.Regression == "true"
				p.Regression = &r
			}
			items, err = h.st.ListAlertGroups(ctx, p)
		}
		if err != nil {
			return nil, storeErr(ctx, h.log, "alerts", err)
		}
		out := &listAlertsOutput{}
		if len(items) > in.Limit {
			items = items[:in.Limit]
			out.Body.NextCursor = items[len(items)-1].ID
		}
		out.Body.Items = mapSlice(items, alertGroupFromStore)
		return out, nil
	})
}

type alertIDInput struct {
	ID int64 `path:"id" minimum:"1"`
}

type alertGroupOutput struct {
	Body *AlertGroup
}

// RegisterGet registers GET /v1/alerts/{id}: a group with its alerts.
func (h *alertHandler) RegisterGet(api huma.API) {
	huma.Register(api, huma.Operation{
		OperationID: "get-alert", Method: http.MethodGet, Path: "/v1/alerts/{id}",
		Summary: "Get an alert group with its alerts", Tags: []string{"alerts"},
	}, func(ctx context.Context, in *alertIDInput) (*alertGroupOutput, error) {
		g, err := h.st.GetAlertGroup(ctx, in.ID)
		if err != nil {
			return nil, storeErr(ctx, h.log, "alert group", err)
		}
		out := alertGroupPtr(g)
		if out.Bisection, err = groupBisection(ctx, h.st, g.ID); err != nil {
			return nil, storeErr(ctx, h.log, "bisection", err)
		}
		if out.AutoBisect, _, err = h.st.AutoBisectOutcome(ctx, g.ID); err != nil && !errors.Is(err, store.ErrNotFound) {
			return nil, storeErr(ctx, h.log, "bisection", err)
		}
		return &alertGroupOutput{Body: out}, nil
	})
}

type triageInput struct {
	ID   int64 `path:"id" minimum:"1"`
	Body struct {
		Status       string `json:"status" enum:"new,acknowledged,invalid,fixed,reassigned" example:"acknowledged" doc:"New triage status of the group and all its alerts."`
		Note         string `json:"note,omitempty" maxLength:"10000" example:"known: ci-4812 changed the prefetch window" doc:"Triage note."`
		ReassignedTo string `json:"reassigned_to,omitempty" maxLength:"200" example:"ci-4810" doc:"Build the regression really belongs to; required with status reassigned."`
	}
}

// RegisterUpdate registers PATCH /v1/alerts/{id}: triage a group (and all
// its alerts): acknowledge, mark invalid, fixed or reassigned.
func (h *alertHandler) RegisterUpdate(api huma.API) {
	huma.Register(api, write(huma.Operation{
		OperationID: "triage-alert", Method: http.MethodPatch, Path: "/v1/alerts/{id}",
		Summary: "Triage an alert group", Tags: []string{"alerts"},
		Errors: []int{http.StatusNotFound, http.StatusUnprocessableEntity},
	}), func(ctx context.Context, in *triageInput) (*alertGroupOutput, error) {
		if in.Body.Status == store.AlertReassigned && in.Body.ReassignedTo == "" {
			return nil, huma.Error422UnprocessableEntity("validation failed", &huma.ErrorDetail{
				Location: "body.reassigned_to", Message: "required when status is reassigned",
			})
		}
		g, err := h.st.TriageAlertGroup(ctx, &store.TriageParams{ID: in.ID, Status: in.Body.Status, Note: in.Body.Note, ReassignedTo: in.Body.ReassignedTo})
		if err != nil {
			return nil, storeErr(ctx, h.log, "alert group", err)
		}
		return &alertGroupOutput{Body: alertGroupPtr(g)}, nil
	})
}
