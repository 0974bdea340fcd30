package api

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/danielgtaylor/huma/v2"
	"github.com/danielgtaylor/huma/v2/sse"

	"github.com/lesfarm/lesfarm/coordinator/store"
	"github.com/lesfarm/lesfarm/jobs"
)

// runHandler serves /v1/runs: trigger, list, get with results, cancel, and
// progress (a blocking wait or a server-sent event stream).
type runHandler struct {
	st        *store.Store
	canceller Canceller
	// poll is the safety poll of waits and streams; notify, when set,
	// wakes them as soon as a followed run changes.
	poll    time.Duration
	notify  *store.RunListener
	log     *slog.Logger
	created func()
	// requireModel refuses triggers whose model was never uploaded
	// (Deps.RequireModelArtifacts).
	requireModel bool
	// dbTimeout bounds each database read of a wait or stream.
	dbTimeout time.Duration
	// egress refuses a suite whose model.url devices may not fetch from.
	egress *egressPolicy
}

// TriggerBody asks for runs of a suite on a build.
type TriggerBody struct {
	Suite    string          `json:"suite" minLength:"1" maxLength:"100" example:"les-ladder" doc:"Suite to run (stored or built-in)."`
	Build    string          `json:"build,omitempty" maxLength:"200" example:"ci-4812" doc:"Registered build to run (lesfarm build push); an id that is not registered is refused with 422 naming the nearest ids. Empty: each device runs its embedded build."`
	GitSHA   string          `json:"git_sha,omitempty" maxLength:"64" pattern:"^[0-9a-f]*$" example:"9813d69" doc:"Git commit of the build (lowercase hex), shown with its runs and alerts."`
	Lineage  string          `json:"lineage,omitempty" minLength:"1" maxLength:"200" pattern:"^[A-Za-z0-9][A-Za-z0-9._-]*$" default:"main" example:"release-3" doc:"Build lineage: the branch the build belongs to (default main). Regression series and alert groups are kept per lineage, so a release branch's builds are compared with each other, not with main's. Letters, digits, '.', '_' and '-'; no '/' (write release/3 as release-3)."`
	Devices  json.RawMessage `json:"devices,omitempty" doc:"Device selector replacing the suite's: {platform, labels, min_ram, device_model, emulated}."`
	Override json.RawMessage `json:"override,omitempty" doc:"Config override: {modes, budgets, profiles, repetitions, warmup, decode_tokens, prefill_tokens, timeout, priority, model, prompts, devices}."`
	Fanout   bool            `json:"fanout,omitempty" doc:"One run per matching online device (pinned to it) instead of one run on the first free matching device." example:"true"`
	// Baseline, MinEffect and MaxRounds make the trigger an A/B
	// comparison (ab.go, docs/ab.md).
	Baseline  string  `json:"baseline,omitempty" maxLength:"200" example:"ci-4811" doc:"Compare build with this baseline build of the same lineage (an A/B gate, docs/ab.md): both run the suite's configs on every matching device that can run both, interleaved in rounds, until a verdict (GET /v1/ab/{id}). \"auto\": the newest earlier build of the lineage with results in the suite. An unknown build or one of another lineage is refused with 422. fanout is implied."`
	MinEffect float64 `json:"min_effect,omitempty" minimum:"0" exclusiveMaximum:"1" example:"0.02" doc:"With baseline: the smallest relative change reported (default: the suite's A/B policy, else 0.02)."`
	MaxRounds int     `json:"max_rounds,omitempty" minimum:"0" maximum:"200" example:"30" doc:"With baseline: the most rounds (one run of each build per device) before the verdict is unknown (default: the suite's A/B policy, else 30)."`
}

type triggerInput struct {
	Wait    bool   `query:"wait" doc:"Block until every run finishes (or wait_timeout passes) and return their final state."`
	Timeout string `query:"wait_timeout" maxLength:"32" default:"1h" example:"30m" doc:"How long to wait with wait=true, 1s to 6h: a Go duration string (90s, 30m, 1h30m) or a number of seconds (3600)."`
	Body    TriggerBody
}

type triggerOutput struct {
	Status int
	Body   *TriggerResult
}

// RegisterTrigger registers POST /v1/runs.
func (h *runHandler) RegisterTrigger(api huma.API) {
	huma.Register(api, write(huma.Operation{
		OperationID: "trigger-runs", Method: http.MethodPost, Path: "/v1/runs",
		Summary: "Trigger runs of a suite on a build", Tags: []string{"runs"},
		Description:   "Creates a trigger and its queued runs (one, or one per matching device with fanout). With wait=true the call blocks until all runs finish; use GET /v1/runs/events?trigger=ID for a progress stream instead.",
		Errors:        []int{http.StatusNotFound, http.StatusUnprocessableEntity, http.StatusConflict},
		DefaultStatus: http.StatusCreated,
	}), func(ctx context.Context, in *triggerInput) (*triggerOutput, error) {
		waitFor, err := waitTimeout(in.Timeout)
		if err != nil {
			return nil, err
		}
		sel, err := decodeSelector(in.Body.Devices, "body.devices")
		if err != nil {
			return nil, err
		}
		ov, err := decodeOverride(in.Body.Override, "body.override")
		if err != nil {
			return nil, err
		}
		base, err := h.st.ResolveSuite(ctx, in.Body.Suite)
		if errors.Is(err, store.ErrNotFound) {
			return nil, huma.Error404NotFound("unknown suite", &huma.ErrorDetail{Location: "body.suite", Message: "no stored or built-in suite has this name", Value: in.Body.Suite})
		}
		if err != nil {
			return nil, storeErr(ctx, h.log, "suite", err)
		}
		spec, err := base.Apply(ov)
		if err != nil {
			return nil, specProblem(err, "body.override", false)
		}
		if err := h.modelProblem(ctx, spec); err != nil {
			return nil, err
		}
		// A suite stored before its host left the allow-list (or before
		// there was one) is refused here (egress.go).
		if err := h.egress.check(ctx, spec, "body.suite"); err != nil {
			return nil, err
		}
		if err := requireBuild(ctx, h.st, h.log, in.Body.Build); err != nil {
			return nil, err
		}
		if err := h.contextProblem(ctx, spec, ov); err != nil { // runs_model.go
			return nil, err
		}
		if in.Body.Baseline != "" {
			return h.triggerAB(ctx, in, spec, sel) // ab.go
		}
		tr, runs, err := h.st.CreateRuns(ctx, &store.CreateRunsParams{
			Spec: spec, Build: in.Body.Build, GitSHA: in.Body.GitSHA, Lineage: in.Body.Lineage, Selector: sel, Fanout: in.Body.Fanout, Source: "api",
		})
		if errors.Is(err, store.ErrNoDevices) {
			return nil, huma.Error409Conflict("no online, undrained device matches the selector", &huma.ErrorDetail{Location: "body.devices", Message: "no device matches"})
		}
		if errors.Is(err, store.ErrBadLineage) {
			return nil, lineageProblem(err, in.Body.Lineage)
		}
		if err != nil {
			var ve *jobs.ValidationError
			if errors.As(err, &ve) {
				return nil, specProblem(err, "body.override", false)
			}
			return nil, storeErr(ctx, h.log, "runs", err)
		}
		if h.created != nil {
			h.created()
		}
		h.log.InfoContext(ctx, "api: runs triggered", "trigger_id", tr.ID, "suite", tr.Suite, "build", tr.Build, "lineage", tr.Lineage, "runs", len(runs))
		final := runs
		if in.Wait {
			wctx, cancel := context.WithTimeout(ctx, waitFor)
			defer cancel()
			last, err := h.waitDone(wctx, tr.RunIDs, nil)
			if err != nil && ctx.Err() != nil {
				return nil, huma.NewError(499, "client went away while waiting")
			}
			if last != nil {
				final = last
			}
		}
		set := &TriggerResult{RunSet: RunSet{Trigger: triggerFromStore(tr), Runs: runsFromStore(final), Done: allTerminal(final)}}
		return &triggerOutput{Status: http.StatusCreated, Body: set}, nil
	})
	h.registerAB(api) // ab.go: GET /v1/ab, /v1/ab/{id}
}

// maxWait bounds wait_timeout.
const maxWait = 6 * time.Hour

// waitTimeout parses the wait_timeout query parameter: a Go duration
// string or, as before durations were strings, a number of seconds.
func waitTimeout(s string) (time.Duration, error) {
	if s == "" {
		return time.Hour, nil
	}
	d, err := jobs.ParseDuration(s)
	if err == nil && (d.D() < time.Second || d.D() > maxWait) {
		err = fmt.Errorf("want 1s to %s, got %s", maxWait, d)
	}
	if err != nil {
		return 0, huma.Error422UnprocessableEntity("validation failed", &huma.ErrorDetail{Location: "query.wait_timeout", Message: err.Error(), Value: s})
	}
	return d.D(), nil
}

// lineageProblem is the 422 for a lineage the store refused (the schema's
// pattern normally catches it first).
func lineageProblem(err error, value string) error {
	return huma.Error422UnprocessableEntity("validation failed", &huma.ErrorDetail{Location: "body.lineage", Message: err.Error(), Value: value})
}

func allTerminal(runs []store.Run) bool {
	for _, r := range runs {
		if !store.TerminalState(r.State) {
			return false
		}
	}
	return len(runs) > 0
}

// waitDone follows the runs until all are terminal or ctx ends, calling
// onChange with each run whose state or progress changed. It returns the
// last snapshot.
func (h *runHandler) waitDone(ctx context.Context, ids []int64, onChange func(store.Run) error) ([]store.Run, error) {
	return h.waitDoneIdle(ctx, ids, nil, onChange)
}

// waitDoneIdle is waitDone that also calls onIdle after every read. It
// re-reads the runs when the run listener reports a change of one of them
// (Postgres LISTEN/NOTIFY) and, as a safety net against a lost
// notification, at least every h.poll.
func (h *runHandler) waitDoneIdle(ctx context.Context, ids []int64, onIdle func() error, onChange func(store.Run) error) ([]store.Run, error) {
	// Subscribe before the first read, so a change between the read and
	// the wait still wakes us.
	sub := h.notify.Subscribe(ids)
	defer sub.Close()
	seen := map[int64]string{}
	var reasons waitingReasons
	var last []store.Run
	poll := h.poll
	if onIdle != nil {
		poll = min(poll, pingEvery) // streams must get their pings
	}
	t := time.NewTimer(poll)
	defer t.Stop()
	for {
		rctx, cancel := context.WithTimeout(ctx, cmp.Or(h.dbTimeout, DefaultRequestTimeout))
		runs, err := h.st.RunsByIDs(rctx, ids)
		cancel()
		if err != nil {
			return last, err
		}
		last = runs
		if err := reasons.fill(ctx, h, runs); err != nil {
			return last, err
		}
		for _, r := range runs {
			key := fmt.Sprintf("%s/%.3f/%s/%d/%s", r.State, r.Progress, r.ProgressMessage, r.Attempts, r.WaitingReason)
			if seen[r.ID] != key {
				seen[r.ID] = key
				if onChange != nil {
					if err := onChange(r); err != nil {
						return last, err
					}
				}
			}
		}
		if allTerminal(runs) || len(runs) == 0 {
			return last, nil
		}
		if onIdle != nil {
			if err := onIdle(); err != nil {
				return last, err
			}
		}
		t.Reset(poll)
		select {
		case <-ctx.Done():
			return last, ctx.Err()
		case <-sub.C():
		case <-t.C:
		}
	}
}

type listRunsInput struct {
	Suite    string   `query:"suite" maxLength:"100"`
	State    []string `query:"state,explode" enum:"queued,assigned,running,succeeded,failed,cancelled,infra_failed,build_failed" doc:"Repeat for several states."`
	Build    string   `query:"build" maxLength:"200"`
	Lineage  string   `query:"lineage" maxLength:"200" pattern:"^(\\*|[A-Za-z0-9][A-Za-z0-9._-]*)$" doc:"Only runs of this build lineage (e.g. main, release-3); empty or * means every lineage."`
	DeviceID string   `query:"device_id" maxLength:"64"`
	Trigger  int64    `query:"trigger" minimum:"0"`
	Cursor   int64    `query:"cursor" minimum:"0" doc:"next_cursor of the previous page (runs are listed newest first)."`
	Limit    int      `query:"limit" minimum:"1" maximum:"1000" default:"50"`
}

type listRunsOutput struct {
	Body struct {
		Items      []Run `json:"items" doc:"Runs, newest first."`
		NextCursor int64 `json:"next_cursor,omitempty" doc:"Pass as cursor to get the next page; absent on the last page." example:"4700"`
	}
}

// RegisterList registers GET /v1/runs.
func (h *runHandler) RegisterList(api huma.API) {
	huma.Register(api, huma.Operation{
		OperationID: "list-runs", Method: http.MethodGet, Path: "/v1/runs",
		Summary: "List runs, newest first", Tags: []string{"runs"},
	}, func(ctx context.Context, in *listRunsInput) (*listRunsOutput, error) {
		items, err := h.st.ListRuns(ctx, &store.ListRunsParams{
			Suite: in.Suite, States: in.State, Build: in.Build, Lineage: lineageFilter(in.Lineage), DeviceID: in.DeviceID, TriggerID: in.Trigger,
			Before: in.Cursor, Limit: in.Limit + 1,
		})
		if err != nil {
			return nil, storeErr(ctx, h.log, "runs", err)
		}
		out := &listRunsOutput{}
		if len(items) > in.Limit {
			items = items[:in.Limit]
			out.Body.NextCursor = items[len(items)-1].ID
		}
		if err := h.st.FillWaitingReasons(ctx, items); err != nil {
			return nil, storeErr(ctx, h.log, "runs", err)
		}
		out.Body.Items = runsFromStore(items)
		hideTokens(ctx, out.Body.Items) // reader.go
		return out, nil
	})
}

type runIDInput struct {
	ID int64 `path:"id" minimum:"1"`
}

type runOutput struct {
	Body *RunDetail
}

// RegisterGet registers GET /v1/runs/{id}: the run, its job snapshot and
// its per-config results.
func (h *runHandler) RegisterGet(api huma.API) {
	huma.Register(api, huma.Operation{
		OperationID: "get-run", Method: http.MethodGet, Path: "/v1/runs/{id}",
		Summary: "Get a run with its results", Tags: []string{"runs"},
	}, func(ctx context.Context, in *runIDInput) (*runOutput, error) {
		r, err := h.st.GetRun(ctx, in.ID)
		if err != nil {
			return nil, storeErr(ctx, h.log, "run", err)
		}
		one := []store.Run{*r}
		if err := h.st.FillWaitingReasons(ctx, one); err != nil {
			return nil, storeErr(ctx, h.log, "run", err)
		}
		r = &one[0]
		d := &RunDetail{Run: runFromStore(r)}
		if !authed(ctx) {
			d.Run.Token = 0 // reader.go
		}
		if j, err := h.st.GetJob(ctx, r.JobID); err == nil {
			d.Job = jobFromStore(j)
		}
		res, err := h.st.ListResults(ctx, &store.ListResultsParams{RunID: r.ID, Limit: jobs.MaxConfigs})
		if err != nil {
			return nil, storeErr(ctx, h.log, "results", err)
		}
		slices.Reverse(res) // config order
		d.Results = mapSlice(res, resultFromStore)
		d.Telemetry = telemetryOf(ctx, h.st, r) // wire_telemetry.go
		if d.ABID, err = h.st.RunComparison(ctx, r.ID); err != nil {
			return nil, storeErr(ctx, h.log, "run", err)
		}
		return &runOutput{Body: d}, nil
	})
}

type cancelInput struct {
	ID   int64 `path:"id" minimum:"1"`
	Body *struct {
		Reason string `json:"reason,omitempty" maxLength:"2000" example:"wrong build" doc:"Why the run is cancelled (default: cancelled through the API)."`
	}
}

type cancelOutput struct {
	Body *Run
}

// RegisterCancel registers POST /v1/runs/{id}/cancel. The run is marked
// cancelled in Postgres first; then its agent is told (if it has one).
func (h *runHandler) RegisterCancel(api huma.API) {
	huma.Register(api, write(huma.Operation{
		OperationID: "cancel-run", Method: http.MethodPost, Path: "/v1/runs/{id}/cancel",
		Summary: "Cancel a run", Tags: []string{"runs"},
		Errors: []int{http.StatusNotFound, http.StatusConflict},
	}), func(ctx context.Context, in *cancelInput) (*cancelOutput, error) {
		reason := "cancelled through the API"
		if in.Body != nil && in.Body.Reason != "" {
			reason = in.Body.Reason
		}
		before, err := h.st.CancelRun(ctx, in.ID, reason)
		if errors.Is(err, store.ErrConflict) {
			return nil, huma.Error409Conflict("run already finished")
		}
		if err != nil {
			return nil, storeErr(ctx, h.log, "run", err)
		}
		if h.canceller != nil && before.Token != 0 {
			if err := h.canceller.CancelRun(ctx, in.ID); err != nil {
				// The run is cancelled in the store; the agent will also
				// learn it from its next heartbeat reply.
				h.log.WarnContext(ctx, "api: cancel push failed", "run_id", in.ID, "err", err)
			}
		}
		r, err := h.st.GetRun(ctx, in.ID)
		if err != nil {
			return nil, storeErr(ctx, h.log, "run", err)
		}
		wire := runFromStore(r)
		return &cancelOutput{Body: &wire}, nil
	})
}

// RunEvent is one progress event of the stream.
type RunEvent struct {
	RunID           int64   `json:"run_id" doc:"Run that changed." example:"4812"`
	State           string  `json:"state" doc:"Its state now." example:"running"`
	DeviceID        string  `json:"device_id,omitempty" doc:"Device of its current or last attempt." example:"pixel8-a1"`
	Attempts        int     `json:"attempts" doc:"Attempts started so far." example:"1"`
	Progress        float64 `json:"progress" doc:"Share of the run done, 0 to 1." example:"0.42"`
	ProgressMessage string  `json:"progress_message,omitempty" doc:"The agent's last progress note." example:"config 3/8: decode"`
	Error           string  `json:"error,omitempty" doc:"Why the run failed." example:"model download: 404"`
	WaitingReason   string  `json:"waiting_reason,omitempty" doc:"Why the run waits while queued (see Run.waiting_reason)." example:"waiting for a free device: 2 online device(s) can run it, all busy"`
}

// PingEvent keeps an idle stream alive through proxies (every 15s without
// another event); clients ignore it.
type PingEvent struct {
	Time time.Time `json:"time" doc:"When the ping was sent." example:"2026-12-01T14:00:15Z"`
}

// pingEvery is how long a progress stream stays silent before a ping.
const pingEvery = 15 * time.Second

// DoneEvent ends the stream: every run is terminal.
type DoneEvent struct {
	Runs      int            `json:"runs" doc:"Runs followed." example:"2"`
	States    map[string]int `json:"states" doc:"How many of them ended in each terminal state." example:"{\"succeeded\":2}"`
	Succeeded bool           `json:"succeeded" doc:"True when every run succeeded." example:"true"`
}

type eventsInput struct {
	Trigger int64   `query:"trigger" minimum:"0" doc:"Follow every run of this trigger."`
	Run     []int64 `query:"run,explode" maxItems:"1000" doc:"Follow these runs (repeatable)."`
}

// RegisterEvents registers GET /v1/runs/events: a server-sent event stream
// with a "run" event whenever a followed run changes state or progress and
// a final "done" event when all are finished.
func (h *runHandler) RegisterEvents(api huma.API) {
	sse.Register(api, huma.Operation{
		OperationID: "run-events", Method: http.MethodGet, Path: "/v1/runs/events",
		Summary: "Stream run progress (SSE)", Tags: []string{"runs"},
		Description: "An unknown trigger is a 404 and a database outage a 503 (with Retry-After) before the stream starts.",
		Errors:      []int{http.StatusNotFound, http.StatusUnprocessableEntity, http.StatusServiceUnavailable},
		Metadata:    map[string]any{"stream": true},
		Middlewares: huma.Middlewares{
			func(ctx huma.Context, next func(huma.Context)) { checkEventsQuery(api, ctx, next) }, // streams.go
			func(ctx huma.Context, next func(huma.Context)) { h.checkTrigger(api, ctx, next) },
		},
	}, map[string]any{
		"run":   RunEvent{},
		"done":  DoneEvent{},
		"ping":  PingEvent{},
		"error": huma.ErrorModel{},
	}, func(ctx context.Context, in *eventsInput, send sse.Sender) {
		ids := slices.Clone(in.Run)
		if in.Trigger != 0 {
			tr, err := h.st.GetTrigger(ctx, in.Trigger)
			if err != nil {
				// checkTrigger found it a moment ago: the database failed.
				status, title := http.StatusNotFound, "Not Found"
				if !errors.Is(err, store.ErrNotFound) {
					status, title = http.StatusServiceUnavailable, "Service Unavailable"
				}
				_ = send(sse.Message{Data: &huma.ErrorModel{Status: status, Title: title, Detail: "trigger: " + err.Error()}}) // the stream ends either way
				return
			}
			ids = append(ids, tr.RunIDs...)
		}
		if len(ids) == 0 {
			_ = send(sse.Message{Data: &huma.ErrorModel{Status: http.StatusUnprocessableEntity, Title: "Unprocessable Entity", Detail: "give trigger or run"}}) // the stream ends either way
			return
		}
		lastSend := time.Now()
		final, err := h.waitDoneIdle(ctx, ids, func() error {
			if time.Since(lastSend) < pingEvery {
				return nil
			}
			lastSend = time.Now()
			return send.Data(PingEvent{Time: lastSend.UTC()})
		}, func(r store.Run) error {
			lastSend = time.Now()
			return send.Data(RunEvent{RunID: r.ID, State: r.State, DeviceID: r.DeviceID, Attempts: r.Attempts,
				Progress: r.Progress, ProgressMessage: r.ProgressMessage, Error: r.Error, WaitingReason: r.WaitingReason})
		})
		if err != nil {
			if ctx.Err() == nil {
				h.log.WarnContext(ctx, "api: run events", "err", err)
			}
			return
		}
		done := DoneEvent{Runs: len(final), States: map[string]int{}, Succeeded: len(final) > 0}
		for _, r := range final {
			done.States[r.State]++
			if r.State != store.RunSucceeded {
				done.Succeeded = false
			}
		}
		_ = send.Data(done) // the last event: the stream ends either way
	})
}

type listResultsInput struct {
	Run         int64  `query:"run" minimum:"0"`
	Suite       string `query:"suite" maxLength:"100"`
	Build       string `query:"build" maxLength:"200"`
	Config      string `query:"config" maxLength:"500"`
	DeviceModel string `query:"device_model" maxLength:"200"`
	Cursor      string `query:"cursor" maxLength:"64" pattern:"^([0-9]+:[0-9]+)?$" doc:"next_cursor of the previous page."`
	Limit       int    `query:"limit" minimum:"1" maximum:"1000" default:"100"`
}

type listResultsOutput struct {
	Body struct {
		Items      []Result `json:"items" doc:"Results, newest run first, then by config index descending."`
		NextCursor string   `json:"next_cursor,omitempty" doc:"Pass as cursor to get the next page; absent on the last page." example:"4700:3"`
	}
}

// resultHandler serves /v1/results: per-config statistics of runs.
type resultHandler struct {
	st  *store.Store
	log *slog.Logger
}

// RegisterList registers GET /v1/results.
func (h *resultHandler) RegisterList(api huma.API) {
	huma.Register(api, huma.Operation{
		OperationID: "list-results", Method: http.MethodGet, Path: "/v1/results",
		Summary: "List results (per run and config), newest run first", Tags: []string{"results"},
	}, func(ctx context.Context, in *listResultsInput) (*listResultsOutput, error) {
		p := &store.ListResultsParams{RunID: in.Run, Suite: in.Suite, Build: in.Build, ConfigKey: in.Config, DeviceModel: in.DeviceModel, Limit: in.Limit + 1}
		if in.Cursor != "" {
			a, b, _ := strings.Cut(in.Cursor, ":")
			// A malformed cursor leaves its fields zero: the list starts
			// from the newest run, as it always has.
			_, _ = fmt.Sscan(a, &p.AfterRun)
			_, _ = fmt.Sscan(b, &p.AfterConfig)
		}
		items, err := h.st.ListResults(ctx, p)
		if err != nil {
			return nil, storeErr(ctx, h.log, "results", err)
		}
		out := &listResultsOutput{}
		if len(items) > in.Limit {
			items = items[:in.Limit]
			last := items[len(items)-1]
			out.Body.NextCursor = fmt.Sprintf("%d:%d", last.RunID, last.ConfigIndex)
		}
		out.Body.Items = mapSlice(items, resultFromStore)
		return out, nil
	})
}

// checkTrigger answers the events request with a plain HTTP error before
// the stream starts when ?trigger= names no trigger (404) or the database
// cannot say (503 with Retry-After), so clients can tell "wrong id" from
// "retry later" by status code.
func (h *runHandler) checkTrigger(api huma.API, ctx huma.Context, next func(huma.Context)) {
	id, err := strconv.ParseInt(ctx.Query("trigger"), 10, 64)
	if err != nil || id <= 0 {
		next(ctx) // absent or invalid: the handler and validation answer
		return
	}
	if _, err := h.st.GetTrigger(ctx.Context(), id); err != nil {
		herr := storeErr(ctx.Context(), h.log, "trigger", err)
		var se huma.StatusError
		if errors.As(herr, &se) {
			var he huma.HeadersError
			if errors.As(herr, &he) {
				for k, vs := range he.GetHeaders() {
					for _, v := range vs {
						ctx.AppendHeader(k, v)
					}
				}
			}
			huma.WriteErr(api, ctx, se.GetStatus(), se.Error())
			return
		}
	}
	next(ctx)
}
