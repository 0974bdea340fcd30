// Package api is the coordinator's REST API: huma v2 operations under /v1,
// the OpenAPI 3.1 document at /openapi.json (and /openapi.yaml), interactive
// docs at /docs, liveness at /healthz, readiness at /readyz and Prometheus
// metrics at /metrics.
//
// Each resource is a handler struct with one Register… method per
// operation; its input and output types sit next to it and their tags are
// the contract. Errors are RFC 9457 problem+json documents
// (application/problem+json) whose "errors" list names the failing field
// by location, e.g. "body.spec.matrix.modes[2]" or "query.limit".
//
// Mutations (every method but GET and HEAD) need a bearer API token created
// with `lesfarm token create`; reads are open unless Deps.RequireAuthForReads
// is set. The API holds no state of its own: Postgres (through
// coordinator/store) is the source of truth, so any number of coordinators
// can serve it.
package api

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/lesfarm/lesfarm/dashboard/apidocs"

	"github.com/danielgtaylor/huma/v2"
	"github.com/danielgtaylor/huma/v2/adapters/humago"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/lesfarm/lesfarm/coordinator/artifact"
	"github.com/lesfarm/lesfarm/coordinator/store"
	"github.com/lesfarm/lesfarm/jobs"
)

// Canceller pushes a run's cancellation to its agent. The coordinator's
// scheduler implements it; the API calls it after marking the run
// cancelled in the store.
type Canceller interface {
	CancelRun(ctx context.Context, runID int64) error
}

// Deps are what the API needs. Store is required; the others are optional
// and disable their endpoints (with a 503 problem) when nil.
type Deps struct {
	Store *store.Store
	// Files holds artifact bytes; nil disables the artifact endpoints.
	Files *artifact.Files
	// Canceller notifies agents of cancelled runs; nil means the store
	// update alone (agents learn at their next heartbeat).
	Canceller Canceller
	// RequireAuthForReads makes GET and HEAD need a token too.
	RequireAuthForReads bool
	// Ready reports whether the coordinator can serve traffic (database
	// reachable, NATS connected, ...). Nil means: ping the store.
	Ready func(ctx context.Context) error
	// Registry receives the API's metrics and Gatherer serves /metrics.
	// Nil means a fresh registry with the Go and process collectors.
	Registry *prometheus.Registry
	// Logger defaults to slog.Default().
	Logger *slog.Logger
	// Version is shown in the OpenAPI document.
	Version string
	// Mount, when set, is called with the mux so the caller can add routes
	// (such as the dashboard at "/") before the API is returned.
	Mount func(mux *http.ServeMux)
	// RunsCreated, when set, is called after a trigger created runs (the
	// coordinator wakes its dispatcher so placement does not wait for its
	// next poll).
	RunsCreated func()
	// RunListener, when set (and started by the caller), wakes run waits
	// and progress streams as soon as a followed run changes (Postgres
	// LISTEN/NOTIFY); they then only poll every WaitPoll as a safety net.
	// Nil means polling alone.
	RunListener *store.RunListener
	// WaitPoll is how often run waits and progress streams re-read the
	// runs without a notification: default 5s with a RunListener, 500ms
	// without.
	WaitPoll time.Duration
	// RequireModelArtifacts makes POST /v1/runs refuse (422, with the
	// 'lesfarm artifact add' hint) a suite whose model has no url or path
	// and was never uploaded, instead of queueing runs that all fail on
	// the download. The coordinator sets it.
	RequireModelArtifacts bool
	// MaxAnonymousStreams bounds the streams (run events, artifact
	// downloads) served at once to requests without a valid API token;
	// one more is refused with 503 and Retry-After. Default
	// DefaultMaxAnonymousStreams.
	MaxAnonymousStreams int
	// UploadIdleTimeout cuts an artifact upload that sends nothing this
	// long (408, partial file removed); default DefaultUploadIdleTimeout.
	UploadIdleTimeout time.Duration
	// DownloadIdleTimeout cuts an artifact download whose client reads
	// nothing this long; default DefaultDownloadIdleTimeout.
	DownloadIdleTimeout time.Duration
	// ArtifactURL is the base URL agents download artifacts from (serve
	// --artifact-url): a suite's model.url may name its host, or a host on
	// the admin's allow-list (PUT /v1/egress), and no other (egress.go).
	ArtifactURL string
	// RequestTimeout bounds an ordinary request's database work (and each
	// database call of a stream or wait); default DefaultRequestTimeout.
	RequestTimeout time.Duration
	// MaxInFlight bounds the ordinary requests served at once; one that
	// cannot start within QueueWait gets 503 with Retry-After. Defaults
	// DefaultMaxInFlight and DefaultQueueWait.
	MaxInFlight int
	QueueWait   time.Duration
}

// Server is the assembled API. Use Handler to serve it.
type Server struct {
	deps    Deps
	api     huma.API
	mux     *http.ServeMux
	log     *slog.Logger
	metrics *metrics
	// inflight holds one token per ordinary request being served.
	inflight chan struct{}
	// anonStreams holds one token per stream or download served without
	// an API token (streams.go).
	anonStreams chan struct{}
}

// New builds the API. The returned handler serves every route; the
// huma.API is exposed for tests (humatest.Wrap) and for the OpenAPI
// document.
func New(d Deps) (http.Handler, huma.API, error) {
	s, err := NewServer(d)
	if err != nil {
		return nil, nil, err
	}
	return s.Handler(), s.api, nil
}

// NewServer is New returning the Server itself.
func NewServer(d Deps) (*Server, error) {
	if d.Store == nil {
		return nil, errors.New("api config: Store is required")
	}
	d.Logger = cmp.Or(d.Logger, slog.Default())
	d.Version = cmp.Or(d.Version, "dev")
	if d.RunListener != nil {
		d.WaitPoll = cmp.Or(d.WaitPoll, 5*time.Second)
	}
	d.WaitPoll = cmp.Or(d.WaitPoll, 500*time.Millisecond)
	d.RequestTimeout = cmp.Or(d.RequestTimeout, DefaultRequestTimeout)
	d.MaxInFlight = cmp.Or(d.MaxInFlight, DefaultMaxInFlight)
	d.QueueWait = cmp.Or(d.QueueWait, DefaultQueueWait)
	d.MaxAnonymousStreams = cmp.Or(d.MaxAnonymousStreams, DefaultMaxAnonymousStreams)
	d.UploadIdleTimeout = cmp.Or(d.UploadIdleTimeout, DefaultUploadIdleTimeout)
	d.DownloadIdleTimeout = cmp.Or(d.DownloadIdleTimeout, DefaultDownloadIdleTimeout)
	if d.Registry == nil {
		d.Registry = prometheus.NewRegistry()
		d.Registry.MustRegister(prometheus.NewGoCollector(), prometheus.NewProcessCollector(prometheus.ProcessCollectorOpts{}))
	}
	installErrorHook.Do(func() {
		orig := huma.NewError
		huma.NewError = func(status int, msg string, errs ...error) huma.StatusError {
			return orig(status, malformedBody(status, msg, errs), pinRequiredLocations(errs)...)
		}
	})
	s := &Server{deps: d, mux: http.NewServeMux(), log: d.Logger, inflight: make(chan struct{}, d.MaxInFlight),
		anonStreams: make(chan struct{}, d.MaxAnonymousStreams)}
	m, err := newMetrics(d.Registry)
	if err != nil {
		return nil, fmt.Errorf("api config: %w", err)
	}
	s.metrics = m

	cfg := huma.DefaultConfig("lesfarm coordinator API", d.Version)
	cfg.Formats = finiteFormats(d.Logger) // never a panic on NaN or ±Inf (finite.go)
	cfg.Info.Description = "REST API of the lesfarm device farm: devices, benchmark suites and jobs, runs and their results, series for the dashboard, regression alerts, nightly schedules and the content-addressed artifact store. Mutations need `Authorization: Bearer <token>` (create one with `lesfarm token create`). Errors are RFC 9457 problem+json."
	cfg.OpenAPIPath = "/openapi"
	cfg.DocsPath = "" // served by apidocs below, from vendored assets (huma's page loads a CDN script)
	cfg.SchemasPath = "/schemas"
	cfg.Components.SecuritySchemes = map[string]*huma.SecurityScheme{
		"bearer": {Type: "http", Scheme: "bearer", Description: "An API token from `lesfarm token create`."},
	}
	s.api = humago.New(s.mux, cfg)
	// The jobs package's unit types marshal as strings ("25%", "30m").
	reg := s.api.OpenAPI().Components.Schemas
	reg.RegisterTypeAlias(reflect.TypeFor[jobs.Budget](), reflect.TypeFor[string]())
	reg.RegisterTypeAlias(reflect.TypeFor[jobs.Duration](), reflect.TypeFor[string]())
	s.api.UseMiddleware(s.metricsMiddleware, s.limitMiddleware, s.authMiddleware, s.nulMiddleware)

	s.registerAll()
	s.mux.Handle("GET /metrics", promhttp.HandlerFor(d.Registry, promhttp.HandlerOpts{}))
	apidocs.Mount(s.mux)
	if d.Mount != nil {
		d.Mount(s.mux)
	}
	return s, nil
}

// installErrorHook makes huma's errors point at the missing field itself.
var installErrorHook sync.Once

// pinRequiredLocations rewrites huma's "expected required property X to be
// present" errors, located at the parent object, to be located at X, so a
// client can highlight the missing field.
func pinRequiredLocations(errs []error) []error {
	for _, err := range errs {
		var d *huma.ErrorDetail
		if !errors.As(err, &d) {
			continue
		}
		d.Value = clipValue(d.Value)
		rest, ok := strings.CutPrefix(d.Message, "expected required property ")
		if !ok {
			continue
		}
		if name, ok := strings.CutSuffix(rest, " to be present"); ok && !strings.ContainsAny(name, " .") {
			d.Location += "." + name
			d.Message = "required property is missing"
		}
	}
	return errs
}

// maxErrorValue bounds the JSON size of the offending value echoed in a
// validation error (an unknown field's whole object, a huge string).
const maxErrorValue = 256

// clipValue returns v, or when its JSON is longer than maxErrorValue a
// string of its first bytes, so a 422 never echoes a megabyte body.
func clipValue(v any) any {
	if v == nil {
		return nil
	}
	if s, ok := v.(string); ok {
		if len(s) <= maxErrorValue {
			return s
		}
		return s[:maxErrorValue] + fmt.Sprintf("… (%d bytes)", len(s))
	}
	b, err := json.Marshal(v)
	if err != nil || len(b) <= maxErrorValue {
		return v
	}
	return string(b[:maxErrorValue]) + fmt.Sprintf("… (%d bytes)", len(b))
}

// Handler returns the HTTP handler serving every route.
func (s *Server) Handler() http.Handler { return s.mux }

func (s *Server) registerAll() {
	health := &healthHandler{ready: s.deps.Ready, st: s.deps.Store}
	health.RegisterHealthz(s.api)
	health.RegisterReadyz(s.api)

	dev := &deviceHandler{st: s.deps.Store, log: s.log}
	dev.RegisterList(s.api)
	dev.RegisterGet(s.api)
	dev.RegisterLabel(s.api)
	dev.RegisterDrain(s.api)
	dev.RegisterUndrain(s.api)

	prof := &profileHandler{st: s.deps.Store, log: s.log}
	prof.RegisterPut(s.api)
	prof.RegisterGet(s.api)

	egress := &egressPolicy{st: s.deps.Store, artifactURL: s.deps.ArtifactURL, log: s.log}
	suites := &suiteHandler{st: s.deps.Store, log: s.log, egress: egress}
	suites.RegisterList(s.api)
	suites.RegisterGet(s.api)
	suites.RegisterPut(s.api)
	suites.RegisterDelete(s.api)

	jobsH := &jobHandler{st: s.deps.Store, log: s.log}
	jobsH.RegisterList(s.api)
	jobsH.RegisterGet(s.api)
	jobsH.RegisterValidate(s.api)

	runs := &runHandler{st: s.deps.Store, canceller: s.deps.Canceller, poll: s.deps.WaitPoll, notify: s.deps.RunListener, log: s.log, created: s.deps.RunsCreated,
		requireModel: s.deps.RequireModelArtifacts, dbTimeout: s.deps.RequestTimeout, egress: egress}
	runs.RegisterTrigger(s.api)
	runs.RegisterList(s.api)
	runs.RegisterEvents(s.api) // before {id}, so "events" is not taken for an id
	runs.RegisterGet(s.api)
	runs.RegisterCancel(s.api)

	drill := &drilldownHandler{st: s.deps.Store, log: s.log}
	drill.RegisterTimeline(s.api)
	drill.RegisterLayers(s.api)
	drill.RegisterExperts(s.api)
	drill.RegisterDeviceTrace(s.api)

	res := &resultHandler{st: s.deps.Store, log: s.log}
	res.RegisterList(s.api)

	series := &seriesHandler{st: s.deps.Store, log: s.log}
	series.RegisterCatalog(s.api)
	series.RegisterSeries(s.api)
	series.RegisterResultSeries(s.api)
	series.RegisterLineages(s.api)

	alerts := &alertHandler{st: s.deps.Store, log: s.log}
	alerts.RegisterList(s.api)
	alerts.RegisterGet(s.api)
	alerts.RegisterUpdate(s.api)
	s.registerBisect() // bisect.go

	sch := &scheduleHandler{st: s.deps.Store, log: s.log}
	sch.RegisterList(s.api)
	sch.RegisterGet(s.api)
	sch.RegisterCreate(s.api)
	sch.RegisterUpdate(s.api)
	sch.RegisterDelete(s.api)
	sch.RegisterFirings(s.api)

	art := &artifactHandler{st: s.deps.Store, files: s.deps.Files, log: s.log, idle: s.deps.UploadIdleTimeout, sendIdle: s.deps.DownloadIdleTimeout}
	art.RegisterUpload(s.api)
	art.RegisterList(s.api)
	art.RegisterInfo(s.api)
	art.RegisterDownload(s.api)
	art.RegisterHead(s.api)
	art.RegisterDelete(s.api)
	art.RegisterPin(s.api)
	art.RegisterGC(s.api)

	bld := &buildHandler{st: s.deps.Store, files: s.deps.Files, log: s.log}
	bld.RegisterPush(s.api)
	bld.RegisterList(s.api)
	bld.RegisterGet(s.api)

	eg := &egressHandler{policy: egress, log: s.log}
	eg.RegisterGet(s.api)
	eg.RegisterPut(s.api)

	documentScopes(s.api)
}

// write marks an operation as a mutation: it documents the bearer
// requirement and the 401 response.
func write(op huma.Operation) huma.Operation {
	op.Security = []map[string][]string{{"bearer": {}}}
	op.Errors = append(op.Errors, http.StatusUnauthorized, http.StatusForbidden)
	return op
}

// public marks an operation that never needs a token (health checks).
func public(op huma.Operation) huma.Operation {
	if op.Metadata == nil {
		op.Metadata = map[string]any{}
	}
	op.Metadata["public"] = true
	return op
}

func isRead(method string) bool { return method == http.MethodGet || method == http.MethodHead }

// authMiddleware enforces bearer tokens on mutations (and on reads when
// RequireAuthForReads is set), and the scope each operation needs
// (scopes.go).
func (s *Server) authMiddleware(ctx huma.Context, next func(huma.Context)) {
	op := ctx.Operation()
	if op.Metadata["public"] == true || (isRead(ctx.Method()) && !s.deps.RequireAuthForReads) {
		rctx := s.readerContext(ctx) // reader.go: a valid token on a read shows fencing tokens
		if op.Metadata["stream"] == true && !authed(rctx.Context()) {
			// streams.go: anonymous streams and downloads are bounded in number.
			release, ok := s.anonStream(ctx)
			if !ok {
				return
			}
			defer release()
		}
		next(rctx)
		return
	}
	h := ctx.Header("Authorization")
	secret, ok := strings.CutPrefix(h, "Bearer ")
	if !ok || secret == "" {
		ctx.SetHeader("WWW-Authenticate", `Bearer realm="lesfarm"`)
		huma.WriteErr(s.api, ctx, http.StatusUnauthorized, "missing bearer token: send 'Authorization: Bearer <token>' (create one with 'lesfarm token create')")
		return
	}
	tok, err := s.deps.Store.VerifyAPIToken(ctx.Context(), strings.TrimSpace(secret))
	if err != nil {
		ctx.SetHeader("WWW-Authenticate", `Bearer realm="lesfarm", error="invalid_token"`)
		if errors.Is(err, store.ErrUnauthorized) {
			huma.WriteErr(s.api, ctx, http.StatusUnauthorized, "invalid, revoked or expired API token")
			return
		}
		s.log.ErrorContext(ctx.Context(), "api: token check failed", "err", err)
		ctx.SetHeader("Retry-After", strconv.Itoa(RetryAfter))
		huma.WriteErr(s.api, ctx, http.StatusServiceUnavailable, "cannot check the API token now")
		return
	}
	if !s.checkScope(ctx, tok) { // scopes.go: 403 naming the scope
		return
	}
	next(huma.WithValue(ctx, tokenNameKey{}, tok.Name))
}

// tokenNameKey is the context key of the name of the API token that
// authenticated a request.
type tokenNameKey struct{}

// tokenName returns the name of the API token that authenticated the
// request of ctx, or "" for an unauthenticated read.
func tokenName(ctx context.Context) string {
	name, _ := ctx.Value(tokenNameKey{}).(string)
	return name
}

// metrics are the API's Prometheus collectors.
type metrics struct {
	requests *prometheus.CounterVec
	latency  *prometheus.HistogramVec
	shed     prometheus.Counter
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "lesfarm_api_requests_total",
			Help: "REST API requests by operation and HTTP status.",
		}, []string{"operation", "status"}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "lesfarm_api_request_duration_seconds",
			Help:    "REST API request latency by operation (streams excluded).",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 16),
		}, []string{"operation"}),
		shed: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "lesfarm_api_shed_total",
			Help: "REST API requests refused with 503 because MaxInFlight requests were already being served.",
		}),
	}
	for _, c := range []prometheus.Collector{m.requests, m.latency, m.shed} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}

func (s *Server) metricsMiddleware(ctx huma.Context, next func(huma.Context)) {
	start := time.Now()
	next(ctx)
	op := ctx.Operation().OperationID
	s.metrics.requests.WithLabelValues(op, strconv.Itoa(ctx.Status())).Inc()
	if ctx.Operation().Metadata["stream"] != true {
		s.metrics.latency.WithLabelValues(op).Observe(time.Since(start).Seconds())
	}
}

// storeErr maps a store error to an API error: ErrNotFound → 404,
// ErrConflict → 409, the database unavailable or too slow → 503 with
// Retry-After, anything else → 500 (logged, details hidden).
func storeErr(ctx context.Context, log *slog.Logger, what string, err error) error {
	switch {
	case errors.Is(err, store.ErrNotFound):
		return huma.Error404NotFound(what + " not found")
	case errors.Is(err, store.ErrConflict):
		return huma.Error409Conflict(what + " conflicts with an existing one")
	case errors.Is(err, context.Canceled):
		return huma.NewError(499, "request cancelled")
	case store.Unavailable(err):
		log.WarnContext(ctx, "api: database unavailable", "what", what, "err", err)
		return unavailable("database unavailable while handling " + what + ", retry later")
	}
	log.ErrorContext(ctx, "api: store error", "what", what, "err", err)
	return huma.Error500InternalServerError("internal error while handling " + what)
}

// RetryAfter is the Retry-After (seconds) sent with a 503.
const RetryAfter = 2

// unavailable is a 503 with Retry-After.
func unavailable(msg string) error {
	return huma.ErrorWithHeaders(huma.Error503ServiceUnavailable(msg), http.Header{"Retry-After": {strconv.Itoa(RetryAfter)}})
}

// healthHandler serves /healthz and /readyz.
type healthHandler struct {
	ready func(context.Context) error
	st    *store.Store
}

type healthOutput struct {
	Body struct {
		Status string `json:"status" example:"ok" doc:"ok (liveness) or ready (readiness)."`
	}
}

// RegisterHealthz registers GET /healthz: the process is alive.
func (h *healthHandler) RegisterHealthz(api huma.API) {
	huma.Register(api, public(huma.Operation{
		OperationID: "healthz",
		Method:      http.MethodGet,
		Path:        "/healthz",
		Summary:     "Liveness: the process answers",
		Tags:        []string{"health"},
	}), func(ctx context.Context, _ *struct{}) (*healthOutput, error) {
		out := &healthOutput{}
		out.Body.Status = "ok"
		return out, nil
	})
}

// RegisterReadyz registers GET /readyz: the coordinator can serve (its
// database answers, and whatever Deps.Ready checks).
func (h *healthHandler) RegisterReadyz(api huma.API) {
	huma.Register(api, public(huma.Operation{
		OperationID: "readyz",
		Method:      http.MethodGet,
		Path:        "/readyz",
		Summary:     "Readiness: dependencies answer",
		Tags:        []string{"health"},
		Errors:      []int{http.StatusServiceUnavailable},
	}), func(ctx context.Context, _ *struct{}) (*healthOutput, error) {
		ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		var err error
		if h.ready != nil {
			err = h.ready(ctx)
		} else {
			err = h.st.Ping(ctx)
		}
		if err != nil {
			return nil, unavailable("not ready: " + err.Error())
		}
		out := &healthOutput{}
		out.Body.Status = "ready"
		return out, nil
	})
}
