package api

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"

	"github.com/danielgtaylor/huma/v2"

	"github.com/lesfarm/lesfarm/coordinator/store"
	"github.com/lesfarm/lesfarm/jobs"
)

// suiteHandler serves /v1/suites: named, editable benchmark specs (the
// built-in ones, e.g. smoke and les-ladder, are stored at startup).
type suiteHandler struct {
	st  *store.Store
	log *slog.Logger
	// egress refuses a model.url on a host devices may not fetch from.
	egress *egressPolicy
}

// SpecInput is a job spec given either as a JSON object (spec) or as YAML
// or JSON text (spec_text), exactly one of them.
type SpecInput struct {
	Spec     json.RawMessage `json:"spec,omitempty" doc:"The job spec as a JSON object (see docs/api.md and the jobs package): name, model, prompts, matrix, repetitions, devices, retry, ..."`
	SpecText string          `json:"spec_text,omitempty" maxLength:"1048576" doc:"The job spec as YAML (or JSON) text; errors then carry line and column." example:"suite: smoke"`
}

// parse validates the spec with the jobs package and maps its issues to
// located problem details (body.spec.<path> or body.spec_text.<path>).
func (in *SpecInput) parse() (*jobs.Spec, error) {
	hasObj := len(in.Spec) > 0 && string(in.Spec) != "null"
	switch {
	case hasObj && in.SpecText != "":
		return nil, huma.Error422UnprocessableEntity("validation failed", &huma.ErrorDetail{Location: "body.spec_text", Message: "give spec or spec_text, not both"})
	case hasObj:
		spec, err := jobs.Parse(in.Spec, jobs.FormatJSON)
		if err != nil {
			return nil, specProblem(err, "body.spec", false)
		}
		return spec, nil
	case in.SpecText != "":
		spec, err := jobs.Parse([]byte(in.SpecText), jobs.FormatAuto)
		if err != nil {
			return nil, specProblem(err, "body.spec_text", true)
		}
		return spec, nil
	}
	return nil, huma.Error422UnprocessableEntity("validation failed", &huma.ErrorDetail{Location: "body.spec", Message: "required property is missing (or give spec_text)"})
}

// specProblem converts a jobs validation error to a 422 with one located
// error per issue. Line and column are kept only for text input (for a
// JSON body they would count from the start of the spec object).
func specProblem(err error, loc string, withLines bool) error {
	var ve *jobs.ValidationError
	if !errors.As(err, &ve) {
		return huma.Error422UnprocessableEntity("validation failed", &huma.ErrorDetail{Location: loc, Message: err.Error()})
	}
	if !withLines {
		for i := range ve.Issues {
			ve.Issues[i].Line, ve.Issues[i].Column = 0, 0
		}
	}
	if perr := specIssues(ve, loc, ""); perr != nil {
		return perr
	}
	return huma.Error422UnprocessableEntity("validation failed", &huma.ErrorDetail{Location: loc, Message: err.Error()})
}

type suiteNameInput struct {
	Name string `path:"name" pattern:"^[a-z0-9][a-z0-9._-]*$" maxLength:"100"`
}

type suiteOutput struct {
	Body *Suite
}

type listSuitesInput struct {
	Cursor string `query:"cursor" maxLength:"100"`
	Limit  int    `query:"limit" minimum:"1" maximum:"500" default:"100"`
}

type listSuitesOutput struct {
	Body struct {
		Items      []Suite `json:"items" doc:"Stored suites, by name."`
		NextCursor string  `json:"next_cursor,omitempty" doc:"Pass as cursor to get the next page; absent on the last page." example:"les-ladder"`
	}
}

// RegisterList registers GET /v1/suites.
func (h *suiteHandler) RegisterList(api huma.API) {
	huma.Register(api, huma.Operation{
		OperationID: "list-suites", Method: http.MethodGet, Path: "/v1/suites",
		Summary: "List suites", Tags: []string{"suites"},
	}, func(ctx context.Context, in *listSuitesInput) (*listSuitesOutput, error) {
		items, err := h.st.ListSuites(ctx, in.Cursor, in.Limit+1)
		if err != nil {
			return nil, storeErr(ctx, h.log, "suites", err)
		}
		out := &listSuitesOutput{}
		if len(items) > in.Limit {
			items = items[:in.Limit]
			out.Body.NextCursor = items[len(items)-1].Name
		}
		out.Body.Items = mapSlice(items, suiteFromStore)
		return out, nil
	})
}

// RegisterGet registers GET /v1/suites/{name}.
func (h *suiteHandler) RegisterGet(api huma.API) {
	huma.Register(api, huma.Operation{
		OperationID: "get-suite", Method: http.MethodGet, Path: "/v1/suites/{name}",
		Summary: "Get a suite", Tags: []string{"suites"},
	}, func(ctx context.Context, in *suiteNameInput) (*suiteOutput, error) {
		su, err := h.st.GetSuite(ctx, in.Name)
		if errors.Is(err, store.ErrNotFound) {
			if spec, berr := jobs.Builtin(in.Name); berr == nil {
				return &suiteOutput{Body: &Suite{Name: in.Name, Spec: *spec, Builtin: true}}, nil
			}
		}
		if err != nil {
			return nil, storeErr(ctx, h.log, "suite", err)
		}
		return &suiteOutput{Body: suitePtr(su)}, nil
	})
}

type putSuiteInput struct {
	Name string `path:"name" pattern:"^[a-z0-9][a-z0-9._-]*$" maxLength:"100"`
	Body SpecInput
}

type putSuiteOutput struct {
	Status int
	Body   *Suite
}

// RegisterPut registers PUT /v1/suites/{name}: create or replace a suite.
// The spec is validated by the jobs package; every issue is reported with
// its location (e.g. body.spec.matrix.modes[2]).
func (h *suiteHandler) RegisterPut(api huma.API) {
	huma.Register(api, write(huma.Operation{
		OperationID: "put-suite", Method: http.MethodPut, Path: "/v1/suites/{name}",
		Summary: "Create or replace a suite", Tags: []string{"suites"},
		Errors: []int{http.StatusUnprocessableEntity},
	}), func(ctx context.Context, in *putSuiteInput) (*putSuiteOutput, error) {
		spec, err := in.Body.parse()
		if err != nil {
			return nil, err
		}
		if spec.Suite != "" && spec.Suite != in.Name {
			loc := "body.spec.suite"
			if in.Body.SpecText != "" {
				loc = "body.spec_text.suite"
			}
			return nil, huma.Error422UnprocessableEntity("validation failed", &huma.ErrorDetail{Location: loc, Message: "differs from the suite name in the path", Value: spec.Suite})
		}
		spec.Suite = in.Name
		if err := h.egress.check(ctx, spec, specLoc(in.Body.SpecText)+".model.url"); err != nil { // egress.go
			return nil, err
		}
		su, created, err := h.st.PutSuite(ctx, in.Name, spec, false)
		if err != nil {
			var ve *jobs.ValidationError
			if errors.As(err, &ve) {
				return nil, specProblem(err, "body.spec", false)
			}
			return nil, storeErr(ctx, h.log, "suite", err)
		}
		out := &putSuiteOutput{Status: http.StatusOK, Body: suitePtr(su)}
		if created {
			out.Status = http.StatusCreated
		}
		return out, nil
	})
}

// RegisterDelete registers DELETE /v1/suites/{name}. Runs keep the job
// snapshots they were created from.
func (h *suiteHandler) RegisterDelete(api huma.API) {
	huma.Register(api, write(huma.Operation{
		OperationID: "delete-suite", Method: http.MethodDelete, Path: "/v1/suites/{name}",
		Summary: "Delete a suite", Tags: []string{"suites"}, DefaultStatus: http.StatusNoContent,
	}), func(ctx context.Context, in *suiteNameInput) (*struct{}, error) {
		if err := h.st.DeleteSuite(ctx, in.Name); err != nil {
			return nil, storeErr(ctx, h.log, "suite", err)
		}
		return nil, nil
	})
}

// jobHandler serves /v1/jobs: immutable spec snapshots that runs were
// created from (created by triggers, deduplicated by fingerprint), and a
// validator.
type jobHandler struct {
	st  *store.Store
	log *slog.Logger
}

type listJobsInput struct {
	Suite  string `query:"suite" maxLength:"100"`
	Cursor int64  `query:"cursor" minimum:"0"`
	Limit  int    `query:"limit" minimum:"1" maximum:"500" default:"50"`
}

type listJobsOutput struct {
	Body struct {
		Items      []Job `json:"items" doc:"Job snapshots, newest first."`
		NextCursor int64 `json:"next_cursor,omitempty" doc:"Pass as cursor to get the next page; absent on the last page." example:"30"`
	}
}

// RegisterList registers GET /v1/jobs.
func (h *jobHandler) RegisterList(api huma.API) {
	huma.Register(api, huma.Operation{
		OperationID: "list-jobs", Method: http.MethodGet, Path: "/v1/jobs",
		Summary: "List job snapshots, newest first", Tags: []string{"jobs"},
	}, func(ctx context.Context, in *listJobsInput) (*listJobsOutput, error) {
		items, err := h.st.ListJobs(ctx, &store.ListJobsParams{Suite: in.Suite, Before: in.Cursor, Limit: in.Limit + 1})
		if err != nil {
			return nil, storeErr(ctx, h.log, "jobs", err)
		}
		out := &listJobsOutput{}
		if len(items) > in.Limit {
			items = items[:in.Limit]
			out.Body.NextCursor = items[len(items)-1].ID
		}
		out.Body.Items = mapSlice(items, func(j *store.Job) Job { return *jobFromStore(j) })
		return out, nil
	})
}

type jobIDInput struct {
	ID int64 `path:"id" minimum:"1"`
}

type jobOutput struct {
	Body *Job
}

// RegisterGet registers GET /v1/jobs/{id}.
func (h *jobHandler) RegisterGet(api huma.API) {
	huma.Register(api, huma.Operation{
		OperationID: "get-job", Method: http.MethodGet, Path: "/v1/jobs/{id}",
		Summary: "Get a job snapshot", Tags: []string{"jobs"},
	}, func(ctx context.Context, in *jobIDInput) (*jobOutput, error) {
		j, err := h.st.GetJob(ctx, in.ID)
		if err != nil {
			return nil, storeErr(ctx, h.log, "job", err)
		}
		return &jobOutput{Body: jobFromStore(j)}, nil
	})
}

type validateInput struct {
	Body SpecInput
}

type validateOutput struct {
	Body struct {
		Spec        *jobs.Spec    `json:"spec" doc:"The normalized spec (defaults filled in)."`
		Fingerprint string        `json:"fingerprint" doc:"Hash of the canonical spec; a trigger of an equal spec reuses its job." example:"5b1f0c9e7a2d4c3b"`
		Configs     []jobs.Config `json:"configs" doc:"The expanded config matrix, in execution order."`
	}
}

// RegisterValidate registers POST /v1/jobs/validate: check a spec without
// storing it and return its normalized form and expanded matrix.
func (h *jobHandler) RegisterValidate(api huma.API) {
	huma.Register(api, huma.Operation{
		OperationID: "validate-job", Method: http.MethodPost, Path: "/v1/jobs/validate",
		Summary: "Validate a job spec and expand its matrix", Tags: []string{"jobs"},
		Description: "Needs no token: it changes nothing. Errors are located at body.spec.<path> (or body.spec_text.<path> with line and column).",
		Errors:      []int{http.StatusUnprocessableEntity},
		Metadata:    map[string]any{"public": true},
	}, func(ctx context.Context, in *validateInput) (*validateOutput, error) {
		spec, err := in.Body.parse()
		if err != nil {
			return nil, err
		}
		out := &validateOutput{}
		out.Body.Spec = spec
		out.Body.Fingerprint = spec.Fingerprint()
		out.Body.Configs = nonNil(spec.Expand())
		return out, nil
	})
}
