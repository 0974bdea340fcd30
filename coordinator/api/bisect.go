package api

import (
	"cmp"
	"context"
	"errors"
	"log/slog"
	"net/http"
	"time"

	"github.com/danielgtaylor/huma/v2"

	"github.com/lesfarm/lesfarm/coordinator/bisect"
	"github.com/lesfarm/lesfarm/coordinator/store"
	"github.com/lesfarm/lesfarm/jobs"
)

// bisectHandler serves bisections: POST /v1/alerts/{id}/bisect starts one
// for an alert group, GET /v1/bisections/{id} reads it and moves it on
// (the coordinator's own loop does too, so one nobody reads still ends),
// POST /v1/bisections/{id}/cancel stops it.
type bisectHandler struct {
	st  *store.Store
	bis *bisect.Bisector
	log *slog.Logger
}

// maxBisectBudget bounds a requested device-time budget.
const maxBisectBudget = 7 * 24 * time.Hour

// registerBisect registers the bisection operations.
func (s *Server) registerBisect() {
	bis, err := bisect.New(bisect.Config{Store: s.deps.Store, Canceller: s.deps.Canceller, Logger: s.log})
	if err != nil {
		panic(err) // Store is checked by NewServer
	}
	h := &bisectHandler{st: s.deps.Store, bis: bis, log: s.log}
	h.RegisterCreate(s.api)
	h.RegisterGet(s.api)
	h.RegisterCancel(s.api)
}

type bisectInput struct {
	ID   int64 `path:"id" minimum:"1" doc:"Alert group id." example:"21"`
	Body struct {
		AlertID   int64         `json:"alert_id,omitempty" minimum:"0" doc:"The group's alert to decide on (its config, metric and device model); default its largest regression on decode_tps, prefill_tps or ttft_ms." example:"55"`
		LastGood  string        `json:"last_good,omitempty" maxLength:"200" doc:"Build known good: the range's start (default the alert's last good build)." example:"ci-4811"`
		FirstBad  string        `json:"first_bad,omitempty" maxLength:"200" doc:"Build known bad: the range's end (default the alert's first bad build)." example:"ci-4819"`
		Budget    jobs.Duration `json:"budget,omitempty" doc:"Device-time budget, e.g. \"4h\" (default 12h); no step or round starts that would pass it." example:"4h"`
		MaxRounds int           `json:"max_rounds,omitempty" minimum:"0" maximum:"200" doc:"Most rounds of one step (default 30); a round is one run of each build." example:"30"`
	} `required:"false"`
}

type bisectionOutput struct {
	Body *Bisection
}

// RegisterCreate registers POST /v1/alerts/{id}/bisect.
func (h *bisectHandler) RegisterCreate(api huma.API) {
	huma.Register(api, write(huma.Operation{
		OperationID: "bisect-alert", Method: http.MethodPost, Path: "/v1/alerts/{id}/bisect",
		Summary: "Bisect an alert group to its culprit build", Tags: []string{"alerts"},
		Description:   "Starts a bisection of the group (docs/bisect.md): between the alert's last good and first bad build of its lineage, on the alerting device (or another of its model), it compares builds with interleaved A/B runs at a priority below nightly work — the endpoints first, then the midpoint against the newest good build — until it names the first bad build and the last good one (culprit), finds the endpoints the same (not_reproduced), or noise exhausts its device-time budget (ambiguous). Its runs are stored like any run (trigger source bisect:<id>) and never enter the regression series. 422 (one line) when the alert has no good build before it, the range crosses lineages, a build is not registered or an end has no executable for the model's devices; 409 when a bisection of the group is running or no device of the model is online.",
		Errors:        []int{http.StatusNotFound, http.StatusConflict, http.StatusUnprocessableEntity},
		DefaultStatus: http.StatusCreated,
	}), func(ctx context.Context, in *bisectInput) (*bisectionOutput, error) {
		if d := in.Body.Budget.D(); d < 0 || d > maxBisectBudget {
			return nil, refusal("budget must be positive and at most 7 days", "body.budget", in.Body.Budget.String())
		}
		bs, err := h.bis.Create(ctx, &bisect.Request{GroupID: in.ID, AlertID: in.Body.AlertID, LastGood: in.Body.LastGood, FirstBad: in.Body.FirstBad,
			Budget: in.Body.Budget.D(), MaxRounds: in.Body.MaxRounds, RequestedBy: tokenName(ctx)})
		if err != nil {
			return nil, h.problem(ctx, err)
		}
		out, err := h.read(ctx, bs)
		if err != nil {
			return nil, storeErr(ctx, h.log, "bisection", err)
		}
		return &bisectionOutput{Body: out}, nil
	})
}

// problem maps a bisect.Problem to its status, anything else as a store
// error.
func (h *bisectHandler) problem(ctx context.Context, err error) error {
	var p *bisect.Problem
	if !errors.As(err, &p) {
		return storeErr(ctx, h.log, "bisection", err)
	}
	detail := &huma.ErrorDetail{Location: p.Location, Message: p.Msg, Value: p.Value}
	switch p.Status {
	case http.StatusNotFound:
		return huma.Error404NotFound(p.Msg)
	case http.StatusConflict:
		return huma.Error409Conflict(p.Msg, detail)
	}
	return huma.Error422UnprocessableEntity(p.Msg, detail)
}

type bisectionIDInput struct {
	ID int64 `path:"id" minimum:"1" doc:"Bisection id." example:"7"`
}

// RegisterGet registers GET /v1/bisections/{id}.
func (h *bisectHandler) RegisterGet(api huma.API) {
	huma.Register(api, huma.Operation{
		OperationID: "get-bisection", Method: http.MethodGet, Path: "/v1/bisections/{id}",
		Summary: "Get a bisection, advancing it", Tags: []string{"alerts"},
		Description: "Returns the bisection with its builds, its steps (samples per side, p-values, the change with its interval) and, once found, the culprit with its git sha and the `git log A..B` range. Reading it moves it on (a decided step starts the next); `lesfarm bisect --wait` polls this.",
		Errors:      []int{http.StatusNotFound},
	}, func(ctx context.Context, in *bisectionIDInput) (*bisectionOutput, error) {
		bs, err := h.bis.Advance(ctx, in.ID)
		if err != nil {
			return nil, storeErr(ctx, h.log, "bisection", err)
		}
		out, err := h.read(ctx, bs)
		if err != nil {
			return nil, storeErr(ctx, h.log, "bisection", err)
		}
		return &bisectionOutput{Body: out}, nil
	})
}

type cancelBisectionInput struct {
	ID   int64 `path:"id" minimum:"1" doc:"Bisection id." example:"7"`
	Body struct {
		Reason string `json:"reason,omitempty" maxLength:"1000" doc:"Why." example:"the alert was a known change"`
	}
}

// RegisterCancel registers POST /v1/bisections/{id}/cancel.
func (h *bisectHandler) RegisterCancel(api huma.API) {
	huma.Register(api, write(huma.Operation{
		OperationID: "cancel-bisection", Method: http.MethodPost, Path: "/v1/bisections/{id}/cancel",
		Summary: "Cancel a running bisection", Tags: []string{"alerts"},
		Description: "Cancels the running step's runs and ends the bisection as cancelled; 409 when it has already ended.",
		Errors:      []int{http.StatusNotFound, http.StatusConflict},
	}), func(ctx context.Context, in *cancelBisectionInput) (*bisectionOutput, error) {
		bs, err := h.bis.Cancel(ctx, in.ID, cmp.Or(in.Body.Reason, "by "+cmp.Or(tokenName(ctx), "an API token")))
		if errors.Is(err, store.ErrConflict) {
			return nil, huma.Error409Conflict("bisection has already ended")
		}
		if err != nil {
			return nil, storeErr(ctx, h.log, "bisection", err)
		}
		out, err := h.read(ctx, bs)
		if err != nil {
			return nil, storeErr(ctx, h.log, "bisection", err)
		}
		return &bisectionOutput{Body: out}, nil
	})
}

// read returns bisection bs with its steps and their runs' states.
func (h *bisectHandler) read(ctx context.Context, bs *store.Bisection) (*Bisection, error) {
	steps, err := h.st.BisectionSteps(ctx, bs.ID)
	if err != nil {
		return nil, err
	}
	states, err := h.st.BisectionRunStates(ctx, bs.ID)
	if err != nil {
		return nil, err
	}
	return bisectionFromStore(bs, steps, states), nil
}

// groupBisection is the newest bisection of alert group gid in brief, nil
// when it has none (GET /v1/alerts/{id} shows it).
func groupBisection(ctx context.Context, st *store.Store, gid int64) (*BisectionBrief, error) {
	bs, err := st.LatestBisection(ctx, gid)
	if errors.Is(err, store.ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	steps, err := st.BisectionSteps(ctx, bs.ID)
	if err != nil {
		return nil, err
	}
	return bisectionBrief(bisectionFromStore(bs, steps, nil)), nil
}
