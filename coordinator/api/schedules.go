package api

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"time"

	"github.com/danielgtaylor/huma/v2"

	"github.com/lesfarm/lesfarm/coordinator/nightly"
	"github.com/lesfarm/lesfarm/coordinator/store"
	"github.com/lesfarm/lesfarm/jobs"
)

// scheduleHandler serves nightly schedules under /v1/schedules.
type scheduleHandler struct {
	st  *store.Store
	log *slog.Logger
}

// ScheduleBody is the writable part of a schedule.
type ScheduleBody struct {
	Name     string `json:"name" minLength:"1" maxLength:"200" pattern:"^[A-Za-z0-9][A-Za-z0-9._-]*$" example:"nightly-ladder" doc:"Unique schedule name."`
	Cron     string `json:"cron" minLength:"1" maxLength:"200" example:"0 2 * * *" doc:"5-field cron expression (minute hour day-of-month month day-of-week) or a descriptor such as @daily or \"@every 6h\"."`
	Timezone string `json:"timezone,omitempty" maxLength:"64" example:"Europe/Paris" doc:"IANA time zone the cron expression is evaluated in (default UTC)."`
	Suite    string `json:"suite" minLength:"1" maxLength:"100" example:"les-ladder" doc:"Suite whose jobs each occurrence triggers."`
	Build    string `json:"build,omitempty" maxLength:"200" example:"nightly-{date}" doc:"Build id of the triggered runs; {date} becomes the occurrence's UTC date (YYYYMMDD)."`
	GitSHA   string `json:"git_sha,omitempty" maxLength:"64" example:"9813d69" doc:"Git commit given to the triggered runs."`
	Lineage  string `json:"lineage,omitempty" minLength:"1" maxLength:"200" pattern:"^[A-Za-z0-9][A-Za-z0-9._-]*$" default:"main" example:"release-3" doc:"Build lineage of the triggered runs (default main): a release branch's nightly gets its own regression series and alert groups. Letters, digits, '.', '_' and '-'; no '/'."`
	// Devices narrows the jobs' device selectors (a jobs.Selector).
	Devices json.RawMessage `json:"devices,omitempty" doc:"Device selector applied to every triggered job: {platform, labels, min_ram, device_model, emulated}."`
	// Override changes the jobs' specs for these runs (a jobs.Override).
	Override       json.RawMessage `json:"override,omitempty" doc:"Config override applied to every triggered job (same fields as a run trigger's override)."`
	Priority       int             `json:"priority,omitempty" minimum:"-1000" maximum:"1000" example:"0" doc:"Priority of the triggered runs; higher runs first."`
	Enabled        *bool           `json:"enabled,omitempty" example:"true" doc:"Disabled schedules do not fire (default true)."`
	Bisect         string          `json:"bisect,omitempty" enum:"off,auto" example:"auto" doc:"auto: when the schedule's runs raise a regression alert group, the coordinator starts one bisection of it by itself, at a priority below nightly work (docs/bisect.md); off (default): bisect by hand."`
	Catchup        *jobs.Duration  `json:"catchup,omitempty" example:"1h" doc:"Missed-occurrence window, 0 to 168h (default 1h): after downtime, the most recent missed occurrence fires if it is at most this old; older ones are skipped. A Go duration string (\"90m\"; a bare number such as \"5400\" is read as seconds)."`
	CatchupSeconds *int            `json:"catchup_seconds,omitempty" minimum:"0" maximum:"604800" deprecated:"true" example:"3600" doc:"Deprecated: use catchup. The missed-occurrence window in seconds; ignored when catchup is given."`
}

// toStore validates b and converts it, computing the next occurrence after
// now. Errors carry body locations.
func (b *ScheduleBody) toStore(ctx context.Context, st *store.Store, now time.Time) (*store.Schedule, error) {
	expr, err := nightly.Parse(b.Cron, b.Timezone)
	if err != nil {
		loc := "body.cron"
		if b.Timezone != "" {
			if _, tzErr := time.LoadLocation(b.Timezone); tzErr != nil {
				loc = "body.timezone"
			}
		}
		return nil, huma.Error422UnprocessableEntity("invalid schedule", &huma.ErrorDetail{Location: loc, Message: err.Error(), Value: b.Cron})
	}
	sc := &store.Schedule{
		Name: b.Name, Cron: b.Cron, Timezone: b.Timezone, Suite: b.Suite, Build: b.Build, GitSHA: b.GitSHA, Lineage: b.Lineage,
		Priority: b.Priority, Enabled: true, CatchupSeconds: 3600, NextFireAt: expr.Next(now), Bisect: cmp.Or(b.Bisect, store.BisectOff),
	}
	if sc.Timezone == "" {
		sc.Timezone = "UTC"
	}
	if err := store.ValidateLineage(sc.Lineage); err != nil {
		return nil, lineageProblem(err, sc.Lineage)
	}
	if sc.Lineage == "" {
		sc.Lineage = store.DefaultLineage
	}
	if b.Enabled != nil {
		sc.Enabled = *b.Enabled
	}
	switch {
	case b.Catchup != nil:
		c := b.Catchup.D()
		if c < 0 || c > maxCatchup || c%time.Second != 0 {
			return nil, huma.Error422UnprocessableEntity("validation failed", &huma.ErrorDetail{Location: "body.catchup",
				Message: fmt.Sprintf("want whole seconds from 0 to %s", maxCatchup), Value: b.Catchup.String()})
		}
		sc.CatchupSeconds = int(c / time.Second)
	case b.CatchupSeconds != nil:
		sc.CatchupSeconds = *b.CatchupSeconds
	}
	if sel, err := decodeSelector(b.Devices, "body.devices"); err != nil {
		return nil, err
	} else if sel != nil {
		sc.DeviceSelector, _ = json.Marshal(sel)
	}
	ov, err := decodeOverride(b.Override, "body.override")
	if err != nil {
		return nil, err
	}
	if ov != nil {
		sc.ConfigOverride, _ = json.Marshal(ov)
	}
	// The suite must exist and the override must apply to it, so a
	// schedule never fails at 2 a.m. for a reason known now.
	base, err := st.ResolveSuite(ctx, b.Suite)
	if errors.Is(err, store.ErrNotFound) {
		return nil, huma.Error422UnprocessableEntity("validation failed", &huma.ErrorDetail{Location: "body.suite", Message: "no stored or built-in suite has this name", Value: b.Suite})
	}
	if err != nil {
		return nil, err
	}
	if _, err := base.Apply(ov); err != nil {
		return nil, specProblem(err, "body.override", false)
	}
	return sc, nil
}

// maxCatchup bounds a schedule's missed-occurrence window.
const maxCatchup = 7 * 24 * time.Hour

type scheduleOutput struct {
	Body *Schedule
}

type listSchedulesInput struct {
	Cursor int64 `query:"cursor" minimum:"0" doc:"next_cursor of the previous page."`
	Limit  int   `query:"limit" minimum:"1" maximum:"500" default:"100"`
}

type listSchedulesOutput struct {
	Body struct {
		Items      []Schedule `json:"items" doc:"Schedules ordered by id."`
		NextCursor int64      `json:"next_cursor,omitempty" doc:"Pass as cursor to get the next page; absent on the last page." example:"3"`
	}
}

// RegisterList registers GET /v1/schedules.
func (h *scheduleHandler) RegisterList(api huma.API) {
	huma.Register(api, huma.Operation{
		OperationID: "list-schedules", Method: http.MethodGet, Path: "/v1/schedules",
		Summary: "List schedules", Tags: []string{"schedules"},
	}, func(ctx context.Context, in *listSchedulesInput) (*listSchedulesOutput, error) {
		items, err := h.st.ListSchedules(ctx, in.Cursor, in.Limit+1)
		if err != nil {
			return nil, storeErr(ctx, h.log, "schedules", err)
		}
		out := &listSchedulesOutput{}
		if len(items) > in.Limit {
			items = items[:in.Limit]
			out.Body.NextCursor = items[len(items)-1].ID
		}
		out.Body.Items = mapSlice(items, scheduleFromStore)
		return out, nil
	})
}

type scheduleIDInput struct {
	ID int64 `path:"id" minimum:"1"`
}

// RegisterGet registers GET /v1/schedules/{id}.
func (h *scheduleHandler) RegisterGet(api huma.API) {
	huma.Register(api, huma.Operation{
		OperationID: "get-schedule", Method: http.MethodGet, Path: "/v1/schedules/{id}",
		Summary: "Get a schedule", Tags: []string{"schedules"},
	}, func(ctx context.Context, in *scheduleIDInput) (*scheduleOutput, error) {
		sc, err := h.st.GetSchedule(ctx, in.ID)
		if err != nil {
			return nil, storeErr(ctx, h.log, "schedule", err)
		}
		return &scheduleOutput{Body: schedulePtr(sc)}, nil
	})
}

type createScheduleInput struct {
	Body ScheduleBody
}

// RegisterCreate registers POST /v1/schedules.
func (h *scheduleHandler) RegisterCreate(api huma.API) {
	huma.Register(api, write(huma.Operation{
		OperationID: "create-schedule", Method: http.MethodPost, Path: "/v1/schedules",
		Summary: "Create a schedule", Tags: []string{"schedules"}, DefaultStatus: http.StatusCreated,
		Errors: []int{http.StatusConflict, http.StatusUnprocessableEntity},
	}), func(ctx context.Context, in *createScheduleInput) (*scheduleOutput, error) {
		sc, err := in.Body.toStore(ctx, h.st, time.Now())
		if err != nil {
			var se huma.StatusError
			if errors.As(err, &se) {
				return nil, err
			}
			return nil, storeErr(ctx, h.log, "schedule", err)
		}
		out, err := h.st.CreateSchedule(ctx, sc)
		if err != nil {
			return nil, storeErr(ctx, h.log, "schedule", err)
		}
		return &scheduleOutput{Body: schedulePtr(out)}, nil
	})
}

type updateScheduleInput struct {
	ID   int64 `path:"id" minimum:"1"`
	Body ScheduleBody
}

// RegisterUpdate registers PUT /v1/schedules/{id}. The next occurrence is
// recomputed from now, so an edit never fires a backlog.
func (h *scheduleHandler) RegisterUpdate(api huma.API) {
	huma.Register(api, write(huma.Operation{
		OperationID: "update-schedule", Method: http.MethodPut, Path: "/v1/schedules/{id}",
		Summary: "Replace a schedule", Tags: []string{"schedules"},
		Errors: []int{http.StatusConflict, http.StatusUnprocessableEntity},
	}), func(ctx context.Context, in *updateScheduleInput) (*scheduleOutput, error) {
		sc, err := in.Body.toStore(ctx, h.st, time.Now())
		if err != nil {
			var se huma.StatusError
			if errors.As(err, &se) {
				return nil, err
			}
			return nil, storeErr(ctx, h.log, "schedule", err)
		}
		sc.ID = in.ID
		out, err := h.st.UpdateSchedule(ctx, sc)
		if err != nil {
			return nil, storeErr(ctx, h.log, "schedule", err)
		}
		return &scheduleOutput{Body: schedulePtr(out)}, nil
	})
}

// RegisterDelete registers DELETE /v1/schedules/{id}.
func (h *scheduleHandler) RegisterDelete(api huma.API) {
	huma.Register(api, write(huma.Operation{
		OperationID: "delete-schedule", Method: http.MethodDelete, Path: "/v1/schedules/{id}",
		Summary: "Delete a schedule", Tags: []string{"schedules"}, DefaultStatus: http.StatusNoContent,
	}), func(ctx context.Context, in *scheduleIDInput) (*struct{}, error) {
		if err := h.st.DeleteSchedule(ctx, in.ID); err != nil {
			return nil, storeErr(ctx, h.log, "schedule", err)
		}
		return nil, nil
	})
}

type firingsInput struct {
	ID    int64 `path:"id" minimum:"1"`
	Limit int   `query:"limit" minimum:"1" maximum:"1000" default:"50"`
}

type firingsOutput struct {
	Body struct {
		Items []ScheduleFiring `json:"items" doc:"Handled occurrences, newest first."`
	}
}

// RegisterFirings registers GET /v1/schedules/{id}/firings: how recent
// occurrences were handled (fired, skipped by the missed-occurrence
// policy, or failed), and by which coordinator.
func (h *scheduleHandler) RegisterFirings(api huma.API) {
	huma.Register(api, huma.Operation{
		OperationID: "list-schedule-firings", Method: http.MethodGet, Path: "/v1/schedules/{id}/firings",
		Summary: "List a schedule's handled occurrences", Tags: []string{"schedules"},
	}, func(ctx context.Context, in *firingsInput) (*firingsOutput, error) {
		if _, err := h.st.GetSchedule(ctx, in.ID); err != nil {
			return nil, storeErr(ctx, h.log, "schedule", err)
		}
		items, err := h.st.ListScheduleFirings(ctx, in.ID, in.Limit)
		if err != nil {
			return nil, storeErr(ctx, h.log, "schedule firings", err)
		}
		out := &firingsOutput{}
		out.Body.Items = mapSlice(items, firingFromStore)
		return out, nil
	})
}
