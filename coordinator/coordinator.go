// Package coordinator wires the farm's brain together: Postgres (the
// source of truth, through coordinator/store), NATS, the dispatcher
// (coordinator/dispatch: placement, assignment, freeing and liveness), the
// ingest consumers (coordinator/ingest), regression detection on finished
// runs (coordinator/regress), bisection, the nightly schedule poller
// (coordinator/nightly), the artifact collector and the REST API. It
// constructs each piece, starts and stops them in order, and keeps the
// readiness checks and metrics of the whole.
//
// Several coordinators may share one database and one NATS cluster: device
// requests are spread over a queue group, runs are claimed with FOR UPDATE
// SKIP LOCKED, and every state lives in Postgres.
//
// New validates the Config, which hands the coordinator its database pool
// (a store.Store) and its NATS connection: the coordinator never starts a
// server. Starting embedded NATS and a local Postgres belongs to the
// command line and the test harness (internal/embedded). Start brings the
// pieces up; Stop shuts down in order and drains in-flight ingest, leaving
// the handed pool and connection open for their owner to close. A
// Coordinator is started once.
package coordinator

import (
	"cmp"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/lesfarm/lesfarm/coordinator/api"
	"github.com/lesfarm/lesfarm/coordinator/artifact"
	"github.com/lesfarm/lesfarm/coordinator/bisect"
	"github.com/lesfarm/lesfarm/coordinator/dispatch"
	"github.com/lesfarm/lesfarm/coordinator/ingest"
	"github.com/lesfarm/lesfarm/coordinator/nightly"
	"github.com/lesfarm/lesfarm/coordinator/regress/monitor"
	"github.com/lesfarm/lesfarm/coordinator/store"
	"github.com/lesfarm/lesfarm/jobs"
	"github.com/lesfarm/lesfarm/migrations"
	"github.com/lesfarm/lesfarm/protocol"
)

// QueueGroup is the NATS queue group coordinators share for device
// requests, so each hello or heartbeat is handled by one coordinator.
const QueueGroup = dispatch.QueueGroup

// DefaultQueueTimeout is Config.QueueTimeout's default: a day, longer than
// any nightly suite waits for a busy fleet, short enough that a run no
// device can take does not stay queued for ever.
const DefaultQueueTimeout = 24 * time.Hour

// Config configures a Coordinator. Store and NATS are required; the zero
// value of every other field picks a default.
type Config struct {
	// Store is the database (required): a pool opened with store.Open.
	// Start applies the migrations through it; Stop does not close it.
	Store *store.Store
	// NATS is the connection to a NATS server with JetStream (required),
	// made with NATSOptions and the credentials or TLS the server needs.
	// Stop drains the coordinator's subscriptions but does not close it.
	NATS *nats.Conn
	// DataDir holds the artifact store (artifacts/) unless ArtifactDir is
	// set.
	DataDir string
	// HTTPAddr is where the REST API listens (empty: no HTTP server; port 0
	// picks a free one, see HTTPAddr()).
	HTTPAddr string
	// HTTPTLS, when set, serves the REST API over HTTPS only (a plaintext
	// request gets Go's "400 Client sent an HTTP request to an HTTPS
	// server"); ArtifactBaseURL then defaults to https://<HTTPAddr>.
	HTTPTLS *tls.Config
	// HTTPHandler builds the HTTP handler from the running pieces. Nil
	// means the REST API (coordinator/api) with the artifact store in
	// ArtifactDir.
	HTTPHandler func(*HTTPDeps) (http.Handler, error)
	// ArtifactDir holds the content-addressed artifact store (default
	// DataDir/artifacts; without either, the artifact endpoints answer 503).
	ArtifactDir string
	// ArtifactGCInterval is the period of the artifact garbage collector
	// (artifact.Collector), which removes unreferenced, unpinned artifacts
	// idle past ArtifactGCGrace; default 6h, negative disables it. It runs
	// only with an artifact store.
	ArtifactGCInterval time.Duration
	// ArtifactGCGrace protects artifacts used more recently than this
	// (default one day).
	ArtifactGCGrace time.Duration
	// OnArtifactGC, if set, is called after each periodic GC pass (tests,
	// metrics).
	OnArtifactGC func(*artifact.GCReport, error)
	// HTTPReadTimeout, HTTPWriteTimeout and HTTPIdleTimeout are the HTTP
	// server's timeouts (defaults 60s, 60s and 120s): a client that sends
	// or reads too slowly, or an idle keep-alive connection, is cut off.
	// The API lifts the read and write timeouts for its streams, uploads
	// and waits.
	HTTPReadTimeout, HTTPWriteTimeout, HTTPIdleTimeout time.Duration
	// Mount adds routes (e.g. the dashboard at "/") to the default API mux.
	Mount func(*http.ServeMux)
	// Version is shown in the OpenAPI document and logs.
	Version string
	// RequireAuthForReads makes the default API require a token for GET
	// and HEAD too.
	RequireAuthForReads bool
	// NoNightly disables the nightly schedule poller.
	NoNightly bool
	// NoRegress disables regression detection on finished runs (and its
	// webhook delivery loop).
	NoRegress bool
	// NightlyInterval is the schedule poll interval (default 15s).
	NightlyInterval time.Duration
	// ArtifactBaseURL is the base URL agents use to download artifacts
	// (/v1/artifacts/<sha256>); default http://<HTTPAddr>.
	ArtifactBaseURL string
	// Name identifies this coordinator in leases and logs (default
	// hostname:pid).
	Name string
	// HeartbeatTTL is the device TTL sent in HelloReply (default 15s).
	HeartbeatTTL time.Duration
	// LeaseTTL is how long a lease lasts without renewal (default
	// HeartbeatTTL).
	LeaseTTL time.Duration
	// LostGrace is added to the TTL before a device is declared lost
	// (default 1s).
	LostGrace time.Duration
	// QueueTimeout ends a run that has stayed queued this long as an
	// infrastructure failure naming why it waited (default
	// DefaultQueueTimeout; negative: never).
	QueueTimeout time.Duration
	// AssignTimeout bounds the wait for an agent's assignment reply
	// (default 5s).
	AssignTimeout time.Duration
	// DispatchInterval is the placement tick (default 500ms); placement
	// also runs on wake-ups (hello, idle heartbeat, run completion).
	DispatchInterval time.Duration
	// DispatchWorkers places on this many devices concurrently (default 4).
	DispatchWorkers int
	// SweepInterval is the period of the lease, timeout and lost-device
	// sweeps (default 1s).
	SweepInterval time.Duration
	// Health tunes the resource checks of /readyz (resources.go).
	Health HealthConfig
	// Ingest tunes the ingest consumers (JS and Store are filled in). Its
	// Reporter, when set, is told of the committed results after the
	// coordinator's own reporter (its CompleteRuns is not used: the
	// dispatcher commits).
	Ingest ingest.Config
	// Registry receives metrics; nil means a fresh registry.
	Registry *prometheus.Registry
	Logger   *slog.Logger
}

// HTTPDeps are the running pieces an HTTP handler is built from.
type HTTPDeps struct {
	Store       *store.Store
	DataDir     string
	ArtifactDir string
	Coordinator *Coordinator
	Registry    *prometheus.Registry
	Logger      *slog.Logger
	// Ready reports whether the coordinator can serve (database and NATS).
	Ready func(ctx context.Context) error
	// RunListener is the coordinator's started run change listener
	// (LISTEN/NOTIFY), for run waits and progress streams.
	RunListener *store.RunListener
}

// Coordinator is a running coordinator. Its methods are safe for concurrent
// use.
type Coordinator struct {
	cfg Config
	log *slog.Logger

	store   *store.Store
	runs    *store.RunListener
	nc      *nats.Conn
	js      jetstream.JetStream
	ingest  *ingest.Ingester
	nightly *nightly.Scheduler
	monitor *monitor.Monitor
	bisect  *bisect.Bisector
	gc      *artifact.Collector
	httpSrv *http.Server
	httpLn  net.Listener
	rejects *protocol.RejectCounter

	// disp places runs and keeps devices alive (coordinator/dispatch).
	disp *dispatch.Dispatcher

	ctx      context.Context
	cancel   context.CancelFunc
	wg       sync.WaitGroup
	res      resources
	stopOnce sync.Once
	stopErr  error
}

// New validates cfg, applies defaults and returns a Coordinator ready to
// Start. cfg must not be reused afterwards.
func New(cfg Config) (*Coordinator, error) {
	if cfg.Store == nil || cfg.NATS == nil {
		return nil, errors.New("coordinator config: Store and NATS are required (open them with store.Open and nats.Connect; internal/embedded starts local servers)")
	}
	cfg.Name = cmp.Or(cfg.Name, defaultName())
	cfg.HeartbeatTTL = cmp.Or(cfg.HeartbeatTTL, 15*time.Second)
	cfg.LeaseTTL = cmp.Or(cfg.LeaseTTL, cfg.HeartbeatTTL)
	cfg.LostGrace = cmp.Or(cfg.LostGrace, time.Second)
	cfg.QueueTimeout = cmp.Or(cfg.QueueTimeout, DefaultQueueTimeout)
	cfg.AssignTimeout = cmp.Or(cfg.AssignTimeout, 5*time.Second)
	cfg.DispatchInterval = cmp.Or(cfg.DispatchInterval, 500*time.Millisecond)
	cfg.DispatchWorkers = cmp.Or(cfg.DispatchWorkers, 4)
	cfg.SweepInterval = cmp.Or(cfg.SweepInterval, time.Second)
	if cfg.HeartbeatTTL < 300*time.Millisecond || cfg.HeartbeatTTL > time.Hour {
		return nil, fmt.Errorf("coordinator config: HeartbeatTTL %s out of range [300ms, 1h]", cfg.HeartbeatTTL)
	}
	if cfg.DispatchWorkers < 1 {
		return nil, errors.New("coordinator config: DispatchWorkers must be positive")
	}
	if cfg.Registry == nil {
		cfg.Registry = prometheus.NewRegistry()
		cfg.Registry.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	}
	if cfg.ArtifactDir == "" && cfg.DataDir != "" {
		cfg.ArtifactDir = filepath.Join(cfg.DataDir, "artifacts")
	}
	if cfg.HTTPHandler == nil {
		cfg.HTTPHandler = defaultHandler(cfg.Mount, cfg.Version, cfg.RequireAuthForReads)
	}
	log := cmp.Or(cfg.Logger, slog.Default())
	return &Coordinator{cfg: cfg, log: log, store: cfg.Store, nc: cfg.NATS, rejects: &protocol.RejectCounter{}}, nil
}

// Start brings the coordinator up on the handed database and NATS
// connection: migrations applied, built-in suites, the signing key,
// ingest, device handlers, the dispatcher, sweeps and the HTTP server. On
// error everything started so far is stopped.
func (c *Coordinator) Start(ctx context.Context) (err error) {
	defer func() {
		if err != nil {
			_ = c.Stop()
		}
	}()
	c.ctx, c.cancel = context.WithCancel(context.WithoutCancel(ctx))
	if err := migrations.Up(ctx, c.store.Pool().Config().ConnString()); err != nil {
		return fmt.Errorf("coordinator: migrate: %w", err)
	}
	for _, name := range jobs.BuiltinNames() {
		spec, err := jobs.Builtin(name)
		if err != nil {
			return err
		}
		if _, _, err := c.store.PutSuite(ctx, name, spec, true); err != nil {
			return fmt.Errorf("coordinator: built-in suite %s: %w", name, err)
		}
	}
	signKey, err := c.store.SigningKey(ctx)
	if err != nil {
		return fmt.Errorf("coordinator: %w", err)
	}
	if c.cfg.HTTPAddr != "" {
		// Listen first: assignments name the artifact URL.
		if err := c.listenHTTP(); err != nil {
			return err
		}
	}
	if c.disp, err = dispatch.New(dispatch.Config{Store: c.store, NATS: c.nc, SigningKey: signKey, Name: c.cfg.Name,
		HeartbeatTTL: c.cfg.HeartbeatTTL, LeaseTTL: c.cfg.LeaseTTL, LostGrace: c.cfg.LostGrace, QueueTimeout: c.cfg.QueueTimeout,
		AssignTimeout: c.cfg.AssignTimeout, Interval: c.cfg.DispatchInterval, Workers: c.cfg.DispatchWorkers,
		SweepInterval: c.cfg.SweepInterval, ArtifactBaseURL: c.cfg.ArtifactBaseURL, ArtifactDir: c.cfg.ArtifactDir,
		FarmUnhealthy: c.FarmUnhealthy, Rejects: c.rejects, Logger: c.log}); err != nil {
		return err
	}
	c.runs = store.NewRunListener(c.store, store.RunListenerConfig{Logger: c.log})
	c.runs.OnNotice(c.disp.Notice)
	if err := c.runs.Start(c.ctx); err != nil {
		return err
	}
	if c.js, err = jetstream.New(c.nc); err != nil {
		return fmt.Errorf("coordinator: jetstream: %w", err)
	}
	if err := c.startIngest(); err != nil {
		return err
	}
	if err := c.disp.Start(c.ctx); err != nil {
		return err
	}
	if err := c.cfg.Registry.Register(&collector{c: c}); err != nil {
		return fmt.Errorf("coordinator: metrics: %w", err)
	}
	if err := c.cfg.Registry.Register(c.disp.Collector()); err != nil {
		return fmt.Errorf("coordinator: metrics: %w", err)
	}
	if c.httpLn != nil {
		if err := c.serveHTTP(ctx); err != nil {
			return err
		}
	}
	if err := c.startServices(); err != nil {
		return err
	}
	c.startHealth()
	c.log.InfoContext(ctx, "coordinator: started", "name", c.cfg.Name, "nats_url", c.NATSURL(), "http_addr", c.HTTPAddr(),
		"heartbeat_ttl", c.cfg.HeartbeatTTL, "signing_key", protocol.KeyID(c.disp.SigningKey()))
	return nil
}

// startIngest starts regression detection, the bisector and the ingest
// consumers, whose committed results the dispatcher places and the
// monitor and bisector observe.
func (c *Coordinator) startIngest() (err error) {
	icfg := c.cfg.Ingest
	icfg.JS, icfg.Store, icfg.Rejects = c.js, c.store, c.rejects
	icfg.Logger = cmp.Or(icfg.Logger, c.log)
	if !c.cfg.NoRegress {
		c.monitor, err = monitor.New(monitor.Config{Store: c.store, Logger: c.log, RequestRerun: monitor.StoreRerunner(c.store)})
		if err != nil {
			return err
		}
		if err := c.monitor.Start(c.ctx); err != nil {
			return err
		}
	}
	// Bisections advance when their runs end (and every poll).
	if c.bisect, err = bisect.New(bisect.Config{Store: c.store, Canceller: c, Logger: c.log}); err != nil {
		return err
	}
	if err := c.bisect.Start(c.ctx); err != nil {
		return err
	}
	icfg.Reporter = reporter{Dispatcher: c.disp, c: c, extra: icfg.Reporter}
	if c.ingest, err = ingest.New(icfg); err != nil {
		return err
	}
	return c.ingest.Start(c.ctx)
}

// startServices starts the nightly schedule poller and the artifact
// garbage collector, unless configured off.
func (c *Coordinator) startServices() (err error) {
	if !c.cfg.NoNightly {
		c.nightly, err = nightly.New(nightly.Config{Store: c.store, Trigger: nightly.StoreTrigger(c.store), Name: c.cfg.Name,
			Interval: c.cfg.NightlyInterval, Logger: c.log})
		if err != nil {
			return err
		}
		if err := c.nightly.Start(c.ctx); err != nil {
			return err
		}
	}
	if c.cfg.ArtifactDir != "" && c.cfg.ArtifactGCInterval >= 0 {
		files, err := artifact.New(artifact.Config{Dir: c.cfg.ArtifactDir})
		if err != nil {
			return fmt.Errorf("coordinator: artifact store: %w", err)
		}
		c.gc = &artifact.Collector{Store: c.store, Files: files, Interval: c.cfg.ArtifactGCInterval, Grace: c.cfg.ArtifactGCGrace,
			Logger: c.log, OnPass: c.cfg.OnArtifactGC}
		if err := c.gc.Start(c.ctx); err != nil {
			return err
		}
	}
	return nil
}

// NATSOptions are the client options of a coordinator's NATS connection
// (name, reconnect forever); add the server's credentials or TLS.
// An empty name is the coordinator's default, hostname:pid.
func NATSOptions(name string) []nats.Option {
	return []nats.Option{nats.Name("lesfarm-coordinator " + cmp.Or(name, defaultName())), nats.MaxReconnects(-1),
		nats.ReconnectWait(500 * time.Millisecond), nats.RetryOnFailedConnect(false)}
}

// listenHTTP opens the HTTP listener, so that the artifact base URL is
// known before the first assignment (serveHTTP serves it).
func (c *Coordinator) listenHTTP() error {
	ln, err := net.Listen("tcp", c.cfg.HTTPAddr)
	if err != nil {
		return fmt.Errorf("coordinator: listen on %s: %w", c.cfg.HTTPAddr, err)
	}
	if c.cfg.HTTPTLS != nil {
		ln = tls.NewListener(ln, c.cfg.HTTPTLS)
	}
	c.httpLn = ln
	if c.cfg.ArtifactBaseURL == "" {
		c.cfg.ArtifactBaseURL = c.HTTPURL()
	}
	return nil
}

// serveHTTP builds the HTTP handler from the running pieces and serves it
// on the listener listenHTTP opened.
func (c *Coordinator) serveHTTP(ctx context.Context) error {
	ln := c.httpLn
	h, err := c.cfg.HTTPHandler(&HTTPDeps{Store: c.store, DataDir: c.cfg.DataDir, ArtifactDir: c.cfg.ArtifactDir, Coordinator: c, Registry: c.cfg.Registry,
		Logger: c.log, Ready: c.Ready, RunListener: c.runs})
	if err != nil {
		return fmt.Errorf("coordinator: http handler: %w", err)
	}
	c.httpSrv = &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:  cmp.Or(c.cfg.HTTPReadTimeout, 60*time.Second),
		WriteTimeout: cmp.Or(c.cfg.HTTPWriteTimeout, 60*time.Second),
		IdleTimeout:  cmp.Or(c.cfg.HTTPIdleTimeout, 120*time.Second)}
	c.wg.Go(func() {
		if err := c.httpSrv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			c.log.Error("coordinator: http server", "err", err)
		}
	})
	c.log.InfoContext(ctx, "coordinator: http listening", "addr", ln.Addr().String(), "url", c.HTTPURL())
	return nil
}

// Stop shuts down in order: HTTP, the nightly poller and the artifact
// collector, the dispatcher (device handlers, placement loops and sweeps,
// assignments in flight, liveness timers), ingest (its batches in flight
// commit and ack), the regression monitor and the run listener. The handed
// NATS connection and store stay open for their owner. It is safe to call
// more than once.
func (c *Coordinator) Stop() error {
	c.stopOnce.Do(func() {
		var errs []error
		if c.httpSrv != nil {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			errs = append(errs, c.httpSrv.Shutdown(ctx))
			cancel()
		} else if c.httpLn != nil {
			c.httpLn.Close() // listened, never served: Start failed
		}
		if c.nightly != nil {
			c.nightly.Stop()
		}
		if c.gc != nil {
			c.gc.Stop()
		}
		if c.disp != nil {
			c.disp.Stop()
		}
		if c.cancel != nil {
			c.cancel()
		}
		c.wg.Wait()
		if c.ingest != nil {
			errs = append(errs, c.ingest.Stop())
		}
		if c.monitor != nil {
			c.monitor.Stop()
		}
		if c.bisect != nil {
			c.bisect.Stop()
		}
		if c.runs != nil {
			c.runs.Stop()
		}
		c.stopErr = errors.Join(errs...)
		c.log.Info("coordinator: stopped", "name", c.cfg.Name)
	})
	return c.stopErr
}

// defaultName is a coordinator's name when Config.Name is empty.
func defaultName() string {
	host, _ := os.Hostname()
	return fmt.Sprintf("%s:%d", host, os.Getpid())
}

// defaultHandler builds the REST API with the artifact store.
func defaultHandler(mount func(*http.ServeMux), version string, authReads bool) func(*HTTPDeps) (http.Handler, error) {
	return func(d *HTTPDeps) (http.Handler, error) {
		var files *artifact.Files
		if d.ArtifactDir != "" {
			var err error
			if files, err = artifact.New(artifact.Config{Dir: d.ArtifactDir}); err != nil {
				return nil, err
			}
		}
		artifactURL := ""
		if d.Coordinator != nil {
			artifactURL = d.Coordinator.cfg.ArtifactBaseURL // model.url may name its host (api egress.go)
		}
		h, _, err := api.New(api.Deps{Store: d.Store, Files: files, Canceller: d.Coordinator, Ready: d.Ready,
			Registry: d.Registry, Logger: d.Logger, Version: version, Mount: mount, RequireAuthForReads: authReads, RunListener: d.RunListener,
			RequireModelArtifacts: true, ArtifactURL: artifactURL})
		return h, err
	}
}
