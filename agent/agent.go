package agent

import (
	"cmp"
	"context"
	"crypto/ed25519"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/lesfarm/lesfarm/agent/artifact"
	"github.com/lesfarm/lesfarm/agent/device"
	"github.com/lesfarm/lesfarm/agent/telemetry"
	"github.com/lesfarm/lesfarm/profile"
	"github.com/lesfarm/lesfarm/protocol"
	"github.com/lesfarm/lesfarm/runtime/calibrate"
	"github.com/lesfarm/lesfarm/runtime/expert"
)

// Config configures an Agent. Zero fields take the documented defaults.
// A Config must not be changed after New.
type Config struct {
	// NATSURL is the NATS server (or comma-separated servers) (required).
	NATSURL string
	// Name is the device id, unique in the farm: 1-64 letters, digits, '_'
	// or '-' (required).
	Name string
	// CredsFile is a NATS .creds file (JWT + nkey) for authentication.
	CredsFile string
	// NKeySeedFile is a file holding an nkey seed (alternative to creds).
	NKeySeedFile string
	// User/Password or Token authenticate with a plain NATS server.
	User, Password, Token string
	// TLSCAFile verifies the server; TLSCertFile/TLSKeyFile are a client
	// certificate. Setting any of them enables TLS.
	TLSCAFile, TLSCertFile, TLSKeyFile string
	// Labels are attached to the device (e.g. lab=desk, pool=ci).
	Labels map[string]string
	// Profile makes the agent an emulated device with this storage profile
	// (a built-in name or a YAML file): experts are read at the profile's
	// speed and the fingerprint says "emulated".
	Profile string
	// CacheDir holds the artifact cache, packed models and the telemetry
	// buffer (required).
	CacheDir string
	// CacheMaxBytes caps the artifact cache; 0 means 20 GiB.
	CacheMaxBytes int64
	// BufferMaxBytes caps the on-disk telemetry buffer; 0 means 64 MiB.
	BufferMaxBytes int64
	// ArtifactToken is sent as a bearer token with artifact downloads,
	// and with the calibrate suite's profile upload to ServerURL.
	ArtifactToken string
	// ArtifactHosts are the hosts artifacts are downloaded from: HOST (any
	// port) or HOST:PORT. Empty means the hosts of NATSURL and ServerURL
	// (any port): the coordinator's own. A URL on another host is refused
	// before any request, whatever the assignment says (issue 29, finding
	// 8; the coordinator refuses such suites too).
	ArtifactHosts []string
	// ServerURL is the coordinator's REST API (e.g. http://farm:8080),
	// where the calibrate suite uploads the device's measured profile
	// (calibrate.go); empty refuses that suite.
	ServerURL string
	// Calibration, if set, sizes the calibrate suite's measurement (test
	// file, read grid, cell time, copy buffer; zero fields keep
	// runtime/calibrate's defaults); the agent sets Name, Dir, Model and
	// Progress itself.
	Calibration *calibrate.Config
	// Threads for the runtime's matrix products; 0 means all CPUs.
	Threads int
	// Direct reads experts with O_DIRECT where supported.
	Direct bool
	// NoExec keeps the agent from executing downloaded build executables:
	// it runs its embedded runtime only, so it takes runs of its own
	// embedded build (Identity.BuildID) and runs without a build. A phone
	// app (agent/mobile) cannot exec downloaded code; a host agent may
	// choose not to.
	NoExec bool
	// BatchInterval and BatchEvents cut telemetry batches (every N ms or M
	// samples); 0 means 500 ms and 256.
	BatchInterval time.Duration
	BatchEvents   int
	// Gate is the thermal gate applied before each repetition.
	Gate ThermalGate
	// Pin and DiscardOutliers apply to every job (Runner.Pin,
	// Runner.DiscardOutliers); a job's spec can ask for them too.
	Pin, DiscardOutliers bool
	// RequestTimeout bounds hello and heartbeat requests; 0 means 5 s.
	RequestTimeout time.Duration
	// ConnectTimeout bounds one NATS connection attempt (dial and
	// handshake); 0 means 2 s. A coordinator that cannot check the
	// credential (database down) holds the handshake past it, so the
	// attempt fails as a timeout and is retried.
	ConnectTimeout time.Duration
	// ReconnectMin and ReconnectMax bound the reconnect backoff (doubling,
	// with jitter); 0 means 250 ms and 15 s.
	ReconnectMin, ReconnectMax time.Duration
	// ShutdownTimeout bounds how long a shutdown waits for the current
	// run's report and the telemetry flush; 0 means 15 s.
	ShutdownTimeout time.Duration
	// Logger receives the agent's logs; nil means slog.Default().
	Logger *slog.Logger
	// OnState, if set, is called (from the agent's goroutines) whenever
	// Status().State changes.
	OnState func(state string)
	// DeviceOptions overrides how the fingerprint is read (tests).
	DeviceOptions *device.Options
	// Phone, if set, makes the agent the farm device of an Android phone
	// driven over adb (phone.go): its fingerprint is the phone's and runs
	// execute on the phone. The agent's own storage profile and embedded
	// runtime do not apply.
	Phone *PhoneConfig
	// Clock is the device's wall clock; nil means time.Now. Tests set a
	// skewed one: the agent must not depend on it agreeing with the
	// coordinator's (see clock.go).
	Clock func() time.Time
}

// Agent states reported by Status.
const (
	StateConnecting = "connecting" // no hello answered yet
	StateIdle       = "idle"       // registered, no run
	StateRunning    = "running"    // a run is in progress
	StateCutOff     = "cut_off"    // coordinator unreachable past the TTL
	StateStopping   = "stopping"
	StateStopped    = "stopped"
)

// Errors that end a run; they decide whether and how it is reported.
var (
	errCancelled = errors.New("cancelled by the coordinator")
	errCutOff    = errors.New("cut off from the coordinator past the TTL; lease gone")
	errLeaseLost = errors.New("the coordinator says the lease is gone")
	errShutdown  = errors.New("agent shutting down")
)

// Agent is one device's agent. Create it with New, run it with Run; Status
// is safe to call concurrently.
type Agent struct {
	cfg    Config
	log    *slog.Logger
	fp     *protocol.Fingerprint
	cache  *artifact.Cache
	buf    *telemetry.Buffer
	runner *Runner
	// verified checks build executables before each exec (childverify.go).
	verified verifiedExecs
	// phone is the attached phone of an agent with Config.Phone.
	phone *phone

	nc     *nats.Conn
	outbox *telemetry.Outbox
	rehelo chan struct{}
	// short says whether the device is short of storage (storage_short.go).
	short storageShort
	// closed receives the connection's last error when nats.go gives up
	// on it (see connClosed).
	closed chan error
	// session is this process's agent session (fence.go).
	session string
	// connDone is closed by the connection's closed handler, which
	// nats.go calls once the connection is closed (after a drain too).
	connDone     chan struct{}
	connDoneOnce sync.Once
	// keyKnown is closed once a hello reply has carried the
	// coordinator's signing key (see awaitSigningKey).
	keyKnown chan struct{}
	keyOnce  sync.Once

	mu          sync.Mutex
	state       string
	registered  bool
	signingKey  ed25519.PublicKey
	ttl         time.Duration
	hbInterval  time.Duration
	lastContact time.Time
	stopping    bool
	current     *activeRun
	lastError   string
	hbSeq       uint64
	runsDone    int
	// clockOffset is the coordinator's clock minus the device's, from the
	// ServerTime of the last hello or heartbeat reply (see clock.go).
	clockOffset time.Duration
	offsetKnown bool
	// unreported are finished runs whose result the coordinator has not
	// committed yet (see unreported.go).
	unreported     []unreportedRun
	unreportedDisk unreportedDisk // the same list on disk, for a restart
	wg             sync.WaitGroup
}

type activeRun struct {
	asg      *protocol.Assignment
	cancel   context.CancelCauseFunc
	done     chan struct{}
	state    string
	progress float64
	message  string
	// abandoned is set when the lease is gone (cut off past the TTL): the
	// run is stopping and is neither reported nor listed in heartbeats.
	abandoned bool
	// deadline is the run's deadline on this process's monotonic clock
	// (zero: none).
	deadline time.Time
}

// New validates cfg, reads the device fingerprint and opens the artifact
// cache and telemetry buffer. It does not connect.
func New(cfg Config) (*Agent, error) {
	if err := cfg.validate(); err != nil {
		return nil, fmt.Errorf("agent config: %w", err)
	}
	cfg.BatchInterval = cmp.Or(cfg.BatchInterval, 500*time.Millisecond)
	cfg.BatchEvents = cmp.Or(cfg.BatchEvents, 256)
	cfg.RequestTimeout = cmp.Or(cfg.RequestTimeout, 5*time.Second)
	cfg.ConnectTimeout = cmp.Or(cfg.ConnectTimeout, 2*time.Second)
	cfg.ReconnectMin = cmp.Or(cfg.ReconnectMin, 250*time.Millisecond)
	cfg.ReconnectMax = cmp.Or(cfg.ReconnectMax, 15*time.Second)
	cfg.ShutdownTimeout = cmp.Or(cfg.ShutdownTimeout, 15*time.Second)
	log := cmp.Or(cfg.Logger, slog.Default())
	a := &Agent{cfg: cfg, log: log, state: StateConnecting, rehelo: make(chan struct{}, 1), closed: make(chan error, 1),
		session: newSession(), connDone: make(chan struct{}), keyKnown: make(chan struct{})}
	a.short.kick = make(chan struct{}, 1)

	var prof *expert.Profile
	dopt := device.Options{StoragePath: cfg.CacheDir}
	if cfg.DeviceOptions != nil {
		dopt = *cfg.DeviceOptions
		dopt.StoragePath = cmp.Or(dopt.StoragePath, cfg.CacheDir)
	}
	if cfg.Profile != "" {
		p, err := profile.Load(cfg.Profile)
		if err != nil {
			return nil, fmt.Errorf("agent config: %w", err)
		}
		prof = p
		dopt.Profile = p.Name
		dopt.RAMBytes = p.RAMBudget
	}
	if err := os.MkdirAll(cfg.CacheDir, 0o755); err != nil {
		return nil, fmt.Errorf("agent: cache dir: %w", err)
	}
	a.fp = device.Read(dopt)
	id, err := SelfIdentity()
	if err != nil {
		return nil, err
	}
	a.fp.EmbeddedBuild, a.fp.EmbeddedSHA256 = id.BuildID, id.SHA256
	if !cfg.NoExec {
		a.fp.ExecPlatform = id.Platform
	}
	if cfg.Phone != nil {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		err := a.attachPhone(ctx)
		cancel()
		if err != nil {
			return nil, err
		}
	}
	hdr := http.Header{}
	if cfg.ArtifactToken != "" {
		hdr.Set("Authorization", "Bearer "+cfg.ArtifactToken)
	}
	// https:// model downloads from the coordinator trust the same CA as
	// NATS (lesfarm serve --tls-cert serves both).
	tc, err := cfg.tlsConfig()
	if err != nil {
		return nil, err
	}
	allow, err := cfg.artifactHosts()
	if err != nil {
		return nil, err
	}
	a.cache, err = artifact.New(artifact.Config{Dir: filepath.Join(cfg.CacheDir, "artifacts"), MaxBytes: cfg.CacheMaxBytes, Header: hdr, TLS: tc, Logger: log,
		AllowHosts: allow})
	if err != nil {
		return nil, err
	}
	a.buf, err = telemetry.OpenBuffer(filepath.Join(cfg.CacheDir, "telemetry"), cfg.BufferMaxBytes)
	if err != nil {
		return nil, err
	}
	// Finished runs a previous process of this agent could not settle
	// (unreported.go): listed in the first hello, their results sent again.
	a.unreportedDisk = unreportedDisk{dir: filepath.Join(cfg.CacheDir, "unreported")}
	if a.unreported, err = a.unreportedDisk.load(time.Now()); err != nil {
		return nil, err
	}
	a.runner = &Runner{Threads: cfg.Threads, Profile: prof, Direct: cfg.Direct, WorkDir: cfg.CacheDir, Gate: cfg.Gate, Logger: log,
		Pin: cfg.Pin, DiscardOutliers: cfg.DiscardOutliers,
		ReadState: func() protocol.DeviceState { return device.ReadState(dopt) }}
	return a, nil
}

func (c *Config) validate() error {
	switch {
	case c.NATSURL == "":
		return errors.New("NATS URL is required")
	case !protocol.ValidDeviceID(c.Name):
		return fmt.Errorf("name %q invalid: use 1-64 letters, digits, '_' or '-'", c.Name)
	case c.CacheDir == "":
		return errors.New("cache dir is required")
	case (c.TLSCertFile == "") != (c.TLSKeyFile == ""):
		return errors.New("a TLS client certificate needs both cert and key files")
	case c.BatchEvents < 0 || c.BatchEvents > protocol.MaxSamplesPerBatch:
		return fmt.Errorf("batch events %d out of range [1, %d]", c.BatchEvents, protocol.MaxSamplesPerBatch)
	}
	if len(c.Labels) > protocol.MaxLabels {
		return fmt.Errorf("too many labels (%d, max %d)", len(c.Labels), protocol.MaxLabels)
	}
	return nil
}

// Fingerprint returns the device fingerprint the agent registers with.
func (a *Agent) Fingerprint() *protocol.Fingerprint { return a.fp }

// Status is a snapshot of the agent for UIs and the mobile facade.
type Status struct {
	State      string  `json:"state"`
	DeviceID   string  `json:"device_id"`
	Connected  bool    `json:"connected"`
	Registered bool    `json:"registered"`
	RunID      int64   `json:"run_id,omitempty"`
	RunState   string  `json:"run_state,omitempty"`
	Progress   float64 `json:"progress,omitempty"`
	Message    string  `json:"message,omitempty"`
	RunsDone   int     `json:"runs_done"`
	LastError  string  `json:"last_error,omitempty"`
	// Telemetry counters: records published, records that went through the
	// disk buffer, records waiting there now, detail records dropped.
	Published uint64 `json:"telemetry_published"`
	Spilled   uint64 `json:"telemetry_spilled"`
	Buffered  int    `json:"telemetry_buffered"`
	Dropped   uint64 `json:"telemetry_dropped"`
	// Emulated is true for an agent with a storage profile.
	Emulated bool   `json:"emulated,omitempty"`
	Profile  string `json:"profile,omitempty"`
}

// Status returns the agent's current status.
func (a *Agent) Status() Status {
	a.mu.Lock()
	s := Status{State: a.state, DeviceID: a.cfg.Name, Registered: a.registered, LastError: a.lastError, RunsDone: a.runsDone,
		Emulated: a.fp.Emulated, Profile: a.fp.Profile}
	if r := a.current; r != nil {
		s.RunID, s.RunState, s.Progress, s.Message = r.asg.RunID, r.state, r.progress, r.message
	}
	nc, ob := a.nc, a.outbox
	a.mu.Unlock()
	if nc != nil {
		s.Connected = nc.IsConnected()
	}
	if ob != nil {
		s.Published, s.Spilled = ob.Stats()
	}
	s.Buffered = a.buf.Len()
	s.Dropped, _ = a.buf.Dropped()
	return s
}

func (a *Agent) setState(st string) {
	a.mu.Lock()
	changed := a.state != st
	a.state = st
	a.mu.Unlock()
	if changed {
		a.announceState(st)
	}
}

// settleState sets the state the agent's situation implies: running while
// a run is current, idle when registered without one. It leaves a
// stopping or unregistered agent's state alone. The check and the update
// are one critical section, so a run that ends while the agent registers
// again cannot leave the state of whichever finished first.
func (a *Agent) settleState() {
	a.mu.Lock()
	if a.stopping || !a.registered {
		a.mu.Unlock()
		return
	}
	st := StateIdle
	if a.current != nil {
		st = StateRunning
	}
	changed := a.state != st
	a.state = st
	a.mu.Unlock()
	if changed {
		a.announceState(st)
	}
}

// announceState logs a state change and tells Config.OnState.
func (a *Agent) announceState(st string) {
	a.log.Info("agent: state", "state", st)
	if a.cfg.OnState != nil {
		a.cfg.OnState(st)
	}
}

func (a *Agent) setError(err error) {
	a.mu.Lock()
	a.lastError = err.Error()
	a.mu.Unlock()
}

// Run connects and serves until ctx is done, then shuts down gracefully:
// it stops accepting work, aborts the current run and reports it, flushes
// telemetry (within ShutdownTimeout) and closes the connection. It returns
// nil after a clean shutdown.
func (a *Agent) Run(ctx context.Context) error {
	opts, err := a.natsOptions()
	if err != nil {
		return err
	}
	a.log.Info("agent: starting", "device_id", a.cfg.Name, "fingerprint", a.fp.String(), "emulated", a.fp.Emulated, "nats_url", a.cfg.NATSURL)
	nc, err := nats.Connect(a.cfg.NATSURL, opts...)
	if err != nil {
		return fmt.Errorf("agent: connect %s: %w", a.cfg.NATSURL, err)
	}
	pub, err := telemetry.NewJetStreamPublisher(nc)
	if err != nil {
		nc.Close()
		return err
	}
	ob, err := telemetry.NewOutbox(telemetry.OutboxConfig{Buffer: a.buf, Publisher: pub, Logger: a.log})
	if err != nil {
		nc.Close()
		return err
	}
	a.mu.Lock()
	a.nc, a.outbox = nc, ob
	replay := make([]unreportedRun, len(a.unreported))
	copy(replay, a.unreported)
	a.mu.Unlock()
	for _, u := range replay {
		a.log.Info("agent: finished run from before a restart, result sent again", "run_id", u.runID, "token", u.token)
		ob.Send(u.rec)
	}

	subA, err := nc.Subscribe(protocol.AssignSubject(a.cfg.Name), a.onAssign)
	if err != nil {
		nc.Close()
		return fmt.Errorf("agent: subscribe: %w", err)
	}
	subC, err := nc.Subscribe(protocol.CancelSubject(a.cfg.Name), a.onCancel)
	if err != nil {
		nc.Close()
		return fmt.Errorf("agent: subscribe: %w", err)
	}

	obCtx, stopOutbox := context.WithCancel(context.Background())
	obDone := make(chan struct{})
	go func() { ob.Run(obCtx); close(obDone) }()

	lost := a.loop(ctx)

	// Graceful shutdown.
	a.setState(StateStopping)
	a.mu.Lock()
	a.stopping = true
	cur := a.current
	a.mu.Unlock()
	_ = subA.Unsubscribe()
	_ = subC.Unsubscribe()
	if cur != nil {
		a.log.Info("agent: aborting the current run for shutdown", "run_id", cur.asg.RunID)
		cur.cancel(errShutdown)
	}
	waitCtx, cancel := context.WithTimeout(context.Background(), a.cfg.ShutdownTimeout)
	defer cancel()
	done := make(chan struct{})
	go func() { a.wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-waitCtx.Done():
		a.log.Warn("agent: run did not stop within the shutdown timeout")
	}
	if nc.IsClosed() {
		a.log.Warn("agent: connection closed, telemetry stays buffered on disk for the next start", "buffered", a.buf.Len())
	} else if err := ob.Flush(waitCtx); err != nil {
		a.log.Warn("agent: telemetry not fully flushed at shutdown; it stays buffered on disk for the next start", "buffered", a.buf.Len())
	}
	stopOutbox()
	<-obDone
	// Drain flushes what is pending and closes the connection; the
	// closed handler says when (bounded: a server that stopped answering
	// must not hold the shutdown).
	if err := nc.Drain(); err == nil {
		select {
		case <-a.connDone:
		case <-time.After(2 * time.Second):
			a.log.Warn("agent: connection drain did not finish within 2s, closing")
		}
	}
	nc.Close()
	a.setState(StateStopped)
	return lost
}
