// Package agent is the on-device program of the farm: it registers the
// device with the coordinator over NATS, heartbeats at the TTL the
// coordinator chooses, accepts signed assignments, downloads and verifies
// the model, runs the job's configs with the embedded LES runtime, streams
// telemetry to JetStream (buffering on disk while NATS is unreachable) and
// reports results carrying the lease's fencing token.
//
// The same Agent runs as a host process (lesfarm agent) and inside a phone
// app (agent/mobile). See doc.go for the state machine.
package agent

import (
	"cmp"
	"context"
	"crypto/ed25519"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/lesfarm/lesfarm/agent/artifact"
	"github.com/lesfarm/lesfarm/agent/device"
	"github.com/lesfarm/lesfarm/agent/telemetry"
	"github.com/lesfarm/lesfarm/jobs"
	"github.com/lesfarm/lesfarm/protocol"
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
	// ArtifactToken is sent as a bearer token with artifact downloads.
	ArtifactToken string
	// Threads for the runtime's matrix products; 0 means all CPUs.
	Threads int
	// Direct reads experts with O_DIRECT where supported.
	Direct bool
	// BatchInterval and BatchEvents cut telemetry batches (every N ms or M
	// samples); 0 means 500 ms and 256.
	BatchInterval time.Duration
	BatchEvents   int
	// Gate is the thermal gate applied before each repetition.
	Gate ThermalGate
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
	fp     *device.Fingerprint
	cache  *artifact.Cache
	buf    *telemetry.Buffer
	runner *Runner

	nc     *nats.Conn
	outbox *telemetry.Outbox
	rehelo chan struct{}
	// closed receives the connection's last error when nats.go gives up
	// on it (see connClosed).
	closed chan error

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
	unreported []unreportedRun
	wg         sync.WaitGroup
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
	a := &Agent{cfg: cfg, log: log, state: StateConnecting, rehelo: make(chan struct{}, 1), closed: make(chan error, 1)}

	var prof *expert.Profile
	dopt := device.Options{StoragePath: cfg.CacheDir}
	if cfg.DeviceOptions != nil {
		dopt = *cfg.DeviceOptions
		dopt.StoragePath = cmp.Or(dopt.StoragePath, cfg.CacheDir)
	}
	if cfg.Profile != "" {
		p, err := expert.LoadProfile(cfg.Profile)
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
	hdr := http.Header{}
	if cfg.ArtifactToken != "" {
		hdr.Set("Authorization", "Bearer "+cfg.ArtifactToken)
	}
	var err error
	a.cache, err = artifact.New(artifact.Config{Dir: filepath.Join(cfg.CacheDir, "artifacts"), MaxBytes: cfg.CacheMaxBytes, Header: hdr, Logger: log})
	if err != nil {
		return nil, err
	}
	a.buf, err = telemetry.OpenBuffer(filepath.Join(cfg.CacheDir, "telemetry"), cfg.BufferMaxBytes)
	if err != nil {
		return nil, err
	}
	a.runner = &Runner{Threads: cfg.Threads, Profile: prof, Direct: cfg.Direct, WorkDir: cfg.CacheDir, Gate: cfg.Gate, Logger: log,
		ReadState: func() device.State { return device.ReadState(dopt) }}
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
func (a *Agent) Fingerprint() *device.Fingerprint { return a.fp }

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
		a.log.Info("agent: state", "state", st)
		if a.cfg.OnState != nil {
			a.cfg.OnState(st)
		}
	}
}

func (a *Agent) setError(err error) {
	a.mu.Lock()
	a.lastError = err.Error()
	a.mu.Unlock()
}

// natsOptions builds the connection options: auth, TLS, and reconnects
// forever with exponential backoff and jitter.
func (a *Agent) natsOptions() ([]nats.Option, error) {
	c := a.cfg
	opts := []nats.Option{
		nats.Name("lesfarm-agent " + c.Name),
		// Replies under the device's own inbox prefix: a coordinator that
		// authenticates devices lets each read only its own replies.
		nats.CustomInboxPrefix(protocol.DeviceInboxPrefix(c.Name)),
		nats.MaxReconnects(-1),
		nats.RetryOnFailedConnect(true),
		nats.Timeout(c.ConnectTimeout),
		nats.CustomReconnectDelay(func(attempts int) time.Duration { return backoff(attempts, c.ReconnectMin, c.ReconnectMax) }),
		nats.ConnectHandler(func(*nats.Conn) { a.log.Info("agent: connected to NATS"); a.kickHello() }),
		nats.ReconnectHandler(func(nc *nats.Conn) {
			a.log.Info("agent: reconnected to NATS", "url", nc.ConnectedUrlRedacted())
			a.kickHello()
			if a.outbox != nil {
				a.outbox.Reconnected()
			}
		}),
		nats.ClosedHandler(func(nc *nats.Conn) { a.connClosed(nc.LastError()) }),
		nats.DisconnectErrHandler(func(_ *nats.Conn, err error) {
			if err != nil {
				a.log.Warn("agent: disconnected from NATS", "err", err)
			}
		}),
	}
	if c.CredsFile != "" {
		opts = append(opts, nats.UserCredentials(c.CredsFile))
	}
	if c.NKeySeedFile != "" {
		o, err := nats.NkeyOptionFromSeed(c.NKeySeedFile)
		if err != nil {
			return nil, fmt.Errorf("agent: nkey seed: %w", err)
		}
		opts = append(opts, o)
	}
	if c.User != "" {
		opts = append(opts, nats.UserInfo(c.User, c.Password))
	}
	if c.Token != "" {
		opts = append(opts, nats.Token(c.Token))
	}
	if c.TLSCAFile != "" || c.TLSCertFile != "" {
		tc := &tls.Config{MinVersion: tls.VersionTLS12}
		if c.TLSCAFile != "" {
			pem, err := os.ReadFile(c.TLSCAFile)
			if err != nil {
				return nil, fmt.Errorf("agent: TLS CA: %w", err)
			}
			pool := x509.NewCertPool()
			if !pool.AppendCertsFromPEM(pem) {
				return nil, fmt.Errorf("agent: TLS CA %s holds no PEM certificate", c.TLSCAFile)
			}
			tc.RootCAs = pool
		}
		if c.TLSCertFile != "" {
			cert, err := tls.LoadX509KeyPair(c.TLSCertFile, c.TLSKeyFile)
			if err != nil {
				return nil, fmt.Errorf("agent: TLS client certificate: %w", err)
			}
			tc.Certificates = []tls.Certificate{cert}
		}
		opts = append(opts, nats.Secure(tc))
	}
	return opts, nil
}

// backoff returns the attempt-th delay: min·2^attempt capped at max, with
// ±25 % jitter so a farm of agents does not reconnect in lockstep.
func backoff(attempt int, lo, hi time.Duration) time.Duration {
	d := lo
	for i := 0; i < attempt && d < hi; i++ {
		d *= 2
	}
	d = min(d, hi)
	j := time.Duration(rand.Int64N(int64(d)/2+1)) - d/4
	return max(d+j, time.Millisecond)
}

func (a *Agent) kickHello() {
	select {
	case a.rehelo <- struct{}{}:
	default:
	}
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
	a.mu.Unlock()

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
	_ = nc.Drain()
	for i := 0; i < 100 && !nc.IsClosed(); i++ {
		time.Sleep(20 * time.Millisecond)
	}
	nc.Close()
	a.setState(StateStopped)
	return lost
}

// loop registers, heartbeats and watches the TTL until ctx is done (nil)
// or the connection is closed for good (the error that closed it).
func (a *Agent) loop(ctx context.Context) error {
	helloAttempt := 0
	var hbTimer *time.Timer
	var nextHello time.Time
	watch := time.NewTicker(250 * time.Millisecond)
	defer watch.Stop()
	needHello := true
	// helloConn is the connection (its reconnect count) the last accepted
	// hello went out on; helloOK says there was one.
	var helloConn uint64
	helloOK := false
	for {
		if needHello && !time.Now().Before(nextHello) {
			conn := a.nc.Stats().Reconnects
			ok, refused := a.hello(ctx)
			if ok {
				needHello = false
				helloOK, helloConn = true, conn
				helloAttempt = 0
				if hbTimer == nil {
					hbTimer = time.NewTimer(a.heartbeatInterval())
				} else {
					hbTimer.Reset(a.heartbeatInterval())
				}
			} else {
				helloAttempt++
				d := backoff(helloAttempt, a.cfg.ReconnectMin, a.cfg.ReconnectMax)
				if refused {
					d = max(d, 10*time.Second)
				}
				nextHello = time.Now().Add(d)
			}
		}
		var hbC <-chan time.Time
		if hbTimer != nil && !needHello {
			hbC = hbTimer.C
		}
		select {
		case <-ctx.Done():
			return nil
		case err := <-a.closed:
			return err
		case <-a.rehelo:
			// A kick is redundant when a hello was accepted on the current
			// connection and the registration still holds (typically the
			// initial-connect kick arriving after the first hello). A
			// second hello would report no run while an assignment may be
			// in flight, and the coordinator would fail that run over.
			a.mu.Lock()
			registered := a.registered
			a.mu.Unlock()
			if needHello || !helloOK || !registered || a.nc.Stats().Reconnects != helloConn {
				needHello = true
				nextHello = time.Time{}
			}
		case <-hbC:
			if !a.heartbeat(ctx) {
				a.mu.Lock()
				known := a.registered
				a.mu.Unlock()
				if !known {
					needHello = true
				}
			}
			hbTimer.Reset(a.heartbeatInterval())
		case <-watch.C:
			a.watchTTL()
		}
	}
}

func (a *Agent) heartbeatInterval() time.Duration {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.hbInterval > 0 {
		return a.hbInterval
	}
	return max(a.ttl/3, 100*time.Millisecond)
}

func (a *Agent) runStatusLocked() []protocol.RunStatus {
	out := a.unreportedStatusLocked()
	if r := a.current; r != nil && !r.abandoned {
		out = append(out, protocol.RunStatus{RunID: r.asg.RunID, Token: r.asg.Token, State: r.state, Progress: r.progress, Message: clipText(r.message)})
	}
	return out
}

// hello registers the device. It returns ok when accepted; refused when
// the coordinator answered but refused.
func (a *Agent) hello(ctx context.Context) (ok, refused bool) {
	a.mu.Lock()
	runs := a.runStatusLocked()
	a.mu.Unlock()
	fp, err := toProtocol(a.fp, device.ReadState(device.Options{Root: a.rootForState()}))
	if err != nil {
		a.log.Error("agent: fingerprint", "err", err)
		return false, true
	}
	sent := a.now()
	msg := &protocol.Hello{DeviceID: a.cfg.Name, Fingerprint: *fp, Labels: a.cfg.Labels, Runs: runs, SentAt: sent.UTC()}
	data, err := protocol.Encode(msg)
	if err != nil {
		a.log.Error("agent: hello not encodable", "err", err)
		a.setError(err)
		return false, true
	}
	rctx, cancel := context.WithTimeout(ctx, a.cfg.RequestTimeout)
	defer cancel()
	resp, err := a.nc.RequestWithContext(rctx, protocol.HelloSubject(a.cfg.Name), data)
	if err != nil {
		a.log.Debug("agent: hello unanswered", "err", err)
		return false, false
	}
	rep, err := protocol.DecodeHelloReply(resp.Data)
	if err != nil {
		a.log.Warn("agent: bad hello reply", "err", err)
		a.setError(err)
		return false, false
	}
	if !rep.Accepted {
		a.log.Warn("agent: coordinator refused the device", "reason", rep.Reason)
		a.setError(fmt.Errorf("coordinator refused the device: %s", rep.Reason))
		return false, true
	}
	a.mu.Lock()
	a.noteServerTimeLocked(sent, rep.ServerTime)
	a.registered = true
	a.signingKey = ed25519.PublicKey(rep.SigningKey)
	a.ttl = rep.TTL()
	a.hbInterval = rep.HeartbeatInterval()
	a.lastContact = time.Now()
	running := a.current != nil
	a.mu.Unlock()
	a.applyCancels(rep.Cancel, errLeaseLost)
	a.log.Info("agent: registered", "device_id", a.cfg.Name, "ttl", rep.TTL().String(), "heartbeat_interval", a.heartbeatInterval().String(), "signing_key", protocol.KeyID(rep.SigningKey))
	if running {
		a.setState(StateRunning)
	} else {
		a.setState(StateIdle)
	}
	return true, false
}

func (a *Agent) rootForState() string {
	if a.cfg.DeviceOptions != nil {
		return a.cfg.DeviceOptions.Root
	}
	return ""
}

// heartbeat renews the device and its run's lease. It returns false when
// the coordinator did not answer or asked for a new hello.
func (a *Agent) heartbeat(ctx context.Context) bool {
	st := device.ReadState(device.Options{Root: a.rootForState()})
	ps := toProtocolState(st)
	a.mu.Lock()
	a.hbSeq++
	sent := a.now()
	msg := &protocol.Heartbeat{DeviceID: a.cfg.Name, Seq: a.hbSeq, Runs: a.runStatusLocked(), State: ps, SentAt: sent.UTC()}
	a.mu.Unlock()
	data, err := protocol.Encode(msg)
	if err != nil {
		a.log.Error("agent: heartbeat not encodable", "err", err)
		return false
	}
	rctx, cancel := context.WithTimeout(ctx, a.cfg.RequestTimeout)
	defer cancel()
	resp, err := a.nc.RequestWithContext(rctx, protocol.HeartbeatSubject(a.cfg.Name), data)
	if err != nil {
		a.log.Debug("agent: heartbeat unanswered", "err", err)
		return false
	}
	rep, err := protocol.DecodeHeartbeatReply(resp.Data)
	if err != nil {
		a.log.Warn("agent: bad heartbeat reply", "err", err)
		return false
	}
	a.mu.Lock()
	a.lastContact = time.Now()
	a.noteServerTimeLocked(sent, rep.ServerTime)
	if rep.TTLMS > 0 {
		a.ttl = rep.TTL()
	}
	if rep.Rehello {
		a.registered = false
	}
	a.mu.Unlock()
	a.applyCancels(rep.Cancel, errLeaseLost)
	if rep.Rehello {
		a.log.Info("agent: coordinator asked for a new hello")
		return false
	}
	return true
}

// applyCancels stops the current run when a notice names it. Notices from
// hello and heartbeat replies mean the lease is gone, so the run is not
// reported.
func (a *Agent) applyCancels(cs []protocol.CancelNotice, cause error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.forgetUnreportedLocked(cs)
	for _, c := range cs {
		if r := a.current; r != nil && r.asg.RunID == c.RunID && r.asg.Token == c.Token {
			a.log.Info("agent: stopping run", "run_id", c.RunID, "reason", c.Reason)
			r.cancel(fmt.Errorf("%w: %s", cause, c.Reason))
		}
	}
}

// watchTTL stops local work when the coordinator has not been reached for
// longer than the TTL: the lease is gone, so the work would be rejected.
func (a *Agent) watchTTL() {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.ttl <= 0 || a.lastContact.IsZero() || time.Since(a.lastContact) <= a.ttl {
		return
	}
	if r := a.current; r != nil && !r.abandoned {
		a.log.Warn("agent: cut off from the coordinator past the TTL, stopping the run", "run_id", r.asg.RunID, "ttl", a.ttl.String(), "last_contact", a.lastContact.Format(time.RFC3339Nano))
		r.abandoned = true
		r.cancel(errCutOff)
	}
	if a.registered {
		a.registered = false
		go a.setState(StateCutOff)
		go a.kickHello()
	}
}

// onAssign answers an assignment: an ack, or a refusal with a code and a
// reason. It never panics on bad input.
func (a *Agent) onAssign(m *nats.Msg) {
	rep := a.handleAssign(m.Data)
	if rep.Accepted {
		a.log.Info("agent: assignment accepted", "run_id", rep.RunID, "token", rep.Token)
	} else {
		a.log.Warn("agent: assignment refused", "run_id", rep.RunID, "code", rep.Code, "reason", rep.Reason)
	}
	rep.Reason = clipText(rep.Reason)
	data, err := protocol.Encode(rep)
	if err != nil {
		// Unaddressable (no run id could be read): answer anyway.
		rep.V = protocol.Version
		data, _ = json.Marshal(rep)
	}
	if err := m.Respond(data); err != nil {
		a.log.Warn("agent: assignment reply failed", "err", err)
	}
}

func refuse(runID, token int64, code, reason string) *protocol.AssignReply {
	return &protocol.AssignReply{RunID: runID, Token: token, Code: code, Reason: reason}
}

// helloReplyWait is how long an assignment that arrives before the reply
// to this agent's hello waits for it: the coordinator may offer a run as
// soon as it has recorded the hello, before its reply (with the signing key
// that verifies the assignment) has been read here.
const helloReplyWait = time.Second

// awaitSigningKey returns the coordinator's signing key, waiting up to d
// for the hello reply that carries it; nil if none came.
func (a *Agent) awaitSigningKey(d time.Duration) ed25519.PublicKey {
	deadline := time.Now().Add(d)
	for {
		a.mu.Lock()
		key := a.signingKey
		a.mu.Unlock()
		if len(key) != 0 || !time.Now().Before(deadline) {
			return key
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func (a *Agent) handleAssign(data []byte) (rep *protocol.AssignReply) {
	runID, token := protocol.PeekAssignment(data)
	defer func() {
		if p := recover(); p != nil {
			rep = refuse(runID, token, protocol.RefuseMalformed, fmt.Sprintf("agent failed to handle the assignment: %v", p))
		}
	}()
	key := a.awaitSigningKey(helloReplyWait)
	if len(key) == 0 {
		return refuse(runID, token, protocol.RefuseBadSignature, "no coordinator signing key known yet (hello not answered)")
	}
	asg, err := protocol.OpenAssignment(data, key)
	if err != nil {
		code := protocol.RefuseMalformed
		if protocol.RejectKind(err) == protocol.RejectSignature {
			code = protocol.RefuseBadSignature
		}
		return refuse(runID, token, code, err.Error())
	}
	if asg.DeviceID != a.cfg.Name {
		return refuse(asg.RunID, asg.Token, protocol.RefuseWrongDevice, fmt.Sprintf("assignment for device %q reached %q", asg.DeviceID, a.cfg.Name))
	}
	if code, reason := a.check(asg); code != "" {
		return refuse(asg.RunID, asg.Token, code, reason)
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	switch {
	case a.stopping:
		return refuse(asg.RunID, asg.Token, protocol.RefuseShuttingDown, "agent is shutting down")
	case a.current != nil && a.current.asg.RunID == asg.RunID && a.current.asg.Token == asg.Token:
		return &protocol.AssignReply{RunID: asg.RunID, Token: asg.Token, Accepted: true} // redelivery
	case a.current != nil:
		return refuse(asg.RunID, asg.Token, protocol.RefuseBusy, fmt.Sprintf("already running run %d", a.current.asg.RunID))
	}
	ctx, cancel := context.WithCancelCause(context.Background())
	var deadline time.Time
	if left, ok := a.runTimeLeftLocked(asg); ok {
		deadline = time.Now().Add(left)
		var c2 context.CancelFunc
		ctx, c2 = context.WithDeadlineCause(ctx, deadline, errors.New("run deadline passed"))
		inner := cancel
		cancel = func(err error) { inner(err); c2() }
	}
	r := &activeRun{asg: asg, cancel: cancel, done: make(chan struct{}), state: protocol.RunStateAccepted, deadline: deadline}
	a.current = r
	a.wg.Add(1)
	go a.execute(ctx, r)
	return &protocol.AssignReply{RunID: asg.RunID, Token: asg.Token, Accepted: true}
}

// check refuses work the device cannot do: an unknown mode, profile or
// prompt set, a packed layout without a work dir, a model whose
// architecture or tensor types this build cannot run (when the assignment
// carries model facts), or a job that needs more memory than the device
// has. It runs before anything is downloaded.
func (a *Agent) check(asg *protocol.Assignment) (code, reason string) {
	spec := &asg.Spec
	if len(spec.ResolvePrompts()) == 0 {
		return protocol.RefuseUnsupported, fmt.Sprintf("prompt set %q is unknown to this agent build", spec.Prompts.Set)
	}
	if l := spec.Model.Layout; l != jobs.LayoutAsIs && l != jobs.LayoutPacked && l != jobs.LayoutPackedCompat && l != "" {
		return protocol.RefuseUnsupported, fmt.Sprintf("model layout %q is not supported", l)
	}
	if asg.Model != nil {
		// Facts from the coordinator: refuse before downloading anything.
		if code, reason := CheckModelSupport(asg.Model); code != "" {
			return code, reason
		}
	}
	var ram int64
	if a.fp.RAMBytes != nil {
		ram = *a.fp.RAMBytes
	}
	for _, c := range asg.Configs {
		if !c.Mode.Valid() {
			return protocol.RefuseUnsupported, fmt.Sprintf("config %s: mode %q is not supported", c.Key, c.Mode)
		}
		if c.Mode != jobs.ModeResident {
			if _, err := runtimeMode(c.Mode); err != nil {
				return protocol.RefuseUnsupported, fmt.Sprintf("config %s: %v", c.Key, err)
			}
		}
		prof, err := a.runner.ResolveProfile(c)
		if err != nil {
			return protocol.RefuseUnsupported, fmt.Sprintf("config %s: %v", c.Key, err)
		}
		limit := ram
		if prof != nil && prof.RAMBudget > 0 && (limit == 0 || prof.RAMBudget < limit) {
			limit = prof.RAMBudget
		}
		if asg.Model != nil {
			if need, why := RequiredModelRAM(asg.Model, c); limit > 0 && need > limit {
				return protocol.RefuseInsufficientRAM, fmt.Sprintf("needs %s, has %s (config %s: %s)", fmtBytes(need), fmtBytes(limit), c.Key, why)
			}
			continue
		}
		need := RequiredRAM(spec, c)
		if limit > 0 && need > limit {
			return protocol.RefuseInsufficientRAM, fmt.Sprintf("config %s needs about %s of RAM, the device has %s", c.Key, jobs.ByteSize(need), jobs.ByteSize(limit))
		}
	}
	return "", ""
}

// RequiredRAM estimates the memory a config needs: the whole model for the
// resident mode; the expert budget (at most the model) plus a tenth of the
// model for the resident weights otherwise.
func RequiredRAM(spec *jobs.Spec, c jobs.Config) int64 {
	size := int64(spec.Model.Size)
	if c.Mode == jobs.ModeResident || c.Mode == jobs.ModeMixedPrecision { // the planner holds all weights
		return size
	}
	return min(c.Budget.Resolve(size), size) + size/10
}

// onCancel stops the named run and reports it as cancelled.
func (a *Agent) onCancel(m *nats.Msg) {
	c, err := protocol.DecodeCancel(m.Data)
	if err != nil {
		a.log.Warn("agent: bad cancel", "err", err)
		return
	}
	known := false
	a.mu.Lock()
	if r := a.current; r != nil && r.asg.RunID == c.RunID && r.asg.Token == c.Token {
		known = true
		r.cancel(fmt.Errorf("%w: %s", errCancelled, c.Reason))
	}
	a.mu.Unlock()
	a.log.Info("agent: cancel received", "run_id", c.RunID, "known", known, "reason", c.Reason)
	if data, err := protocol.Encode(&protocol.CancelReply{RunID: c.RunID, Known: known}); err == nil {
		_ = m.Respond(data)
	}
}

func (a *Agent) setRun(r *activeRun, state string, progress float64, msg string) {
	a.mu.Lock()
	r.state = state
	if progress >= 0 {
		r.progress = progress
	}
	r.message = msg
	a.mu.Unlock()
}

// execute runs one assignment and reports its result, unless the lease is
// gone (cut off, or the coordinator said so).
func (a *Agent) execute(ctx context.Context, r *activeRun) {
	defer a.wg.Done()
	defer close(r.done)
	asg := r.asg
	log := a.log.With("run_id", asg.RunID, "token", asg.Token)
	a.setState(StateRunning)
	started := time.Now().UTC()
	subject := protocol.DeviceTelemetrySubject(a.cfg.Name, asg.RunID)
	_, dropped0 := a.buf.Dropped()
	lastDropped := dropped0[subject]
	var dropMu sync.Mutex
	agg := telemetry.NewAggregator(telemetry.AggregatorConfig{
		RunID: asg.RunID, Token: asg.Token, DeviceID: a.cfg.Name,
		FlushEvery: a.cfg.BatchInterval, MaxEvents: a.cfg.BatchEvents,
		Emit: func(b *protocol.TelemetryBatch) {
			dropMu.Lock()
			if _, by := a.buf.Dropped(); by[subject] > lastDropped {
				b.Dropped += by[subject] - lastDropped
				lastDropped = by[subject]
			}
			dropMu.Unlock()
			data, err := protocol.Encode(b)
			if err != nil {
				log.Error("agent: telemetry batch not encodable, dropped", "seq", b.Seq, "err", err)
				return
			}
			a.outbox.Send(telemetry.Record{Subject: subject, MsgID: fmt.Sprintf("t/%d/%d/%d", asg.RunID, asg.Token, b.Seq), Data: data})
		},
	})

	res := &protocol.Result{RunID: asg.RunID, Token: asg.Token, DeviceID: a.cfg.Name, StartedAt: started}
	runErr := func() error {
		a.setRun(r, protocol.RunStateDownloading, 0, "downloading "+asg.Artifact.Name)
		lastPct := -1.0
		h, err := a.cache.Get(ctx, artifact.Spec{URL: asg.Artifact.URL, SHA256: asg.Artifact.SHA256, Size: asg.Artifact.Size}, func(done, total int64) {
			agg.Progress(protocol.Progress{Phase: "download", Done: done, Total: total})
			if pct := float64(done) / float64(total); pct-lastPct >= 0.01 {
				lastPct = pct
				a.setRun(r, protocol.RunStateDownloading, 0.1*pct, "downloading "+asg.Artifact.Name)
			}
		})
		if err != nil {
			return fmt.Errorf("artifact: %w", err)
		}
		defer h.Release()
		a.setRun(r, protocol.RunStateRunning, 0.1, "")
		n := len(asg.Configs)
		cr, err := a.runner.Run(ctx, &Job{
			Spec: &asg.Spec, Configs: asg.Configs, ModelPath: h.Path, Sink: agg, Position: agg.SetPosition,
			OnConfig: func(i int, c jobs.Config) {
				agg.Progress(protocol.Progress{Phase: "config", Done: int64(i), Total: int64(n), Message: c.Key})
				a.setRun(r, protocol.RunStateRunning, 0.1+0.9*float64(i)/float64(n), c.Key)
			},
		})
		res.Configs = cr
		return err
	}()
	agg.Close()
	a.setRun(r, protocol.RunStateFinishing, 1, "")
	cause := context.Cause(ctx)
	if runErr != nil && cause != nil {
		runErr = cause
	}
	switch {
	case errors.Is(runErr, errCutOff) || errors.Is(runErr, errLeaseLost):
		log.Warn("agent: run abandoned without a report", "reason", runErr)
		a.finish(r, runErr)
		return
	case runErr == nil:
		res.Outcome = protocol.OutcomeSucceeded
	case errors.Is(runErr, errCancelled):
		res.Outcome = protocol.OutcomeCancelled
		res.Error = clipText(runErr.Error())
	case errors.Is(runErr, errShutdown):
		// Not the run's fault: the coordinator requeues it elsewhere.
		res.Outcome = protocol.OutcomeAborted
		res.Error = clipText(runErr.Error())
	default:
		res.Outcome = protocol.OutcomeFailed
		res.Error = clipText(runErr.Error())
	}
	res.TelemetryBatches, res.TelemetrySamples = agg.Counts()
	_, dropped := a.buf.Dropped()
	res.TelemetryDropped = dropped[subject] - dropped0[subject]
	res.FinishedAt = time.Now().UTC()
	data, err := protocol.Encode(res)
	if err != nil {
		// Never lose the report: fall back to a failed result without configs.
		log.Error("agent: result not encodable", "err", err)
		res.Configs, res.Outcome, res.Error = nil, protocol.OutcomeFailed, clipText("agent could not encode the result: "+err.Error())
		data, err = protocol.Encode(res)
		if err != nil {
			a.finish(r, err)
			return
		}
	}
	a.mu.Lock()
	a.noteUnreportedLocked(r)
	a.mu.Unlock()
	a.outbox.Send(telemetry.Record{Subject: protocol.DeviceResultSubject(a.cfg.Name, asg.RunID), MsgID: "r/" + strconv.FormatInt(asg.RunID, 10) + "/" + strconv.FormatInt(asg.Token, 10), Data: data, Summary: true})
	log.Info("agent: run reported", "outcome", res.Outcome, "configs", len(res.Configs), "telemetry_batches", res.TelemetryBatches, "telemetry_samples", res.TelemetrySamples, "err", res.Error)
	a.finish(r, runErr)
}

func (a *Agent) finish(r *activeRun, err error) {
	if err != nil {
		a.setError(err)
	}
	r.cancel(nil)
	a.mu.Lock()
	if a.current == r {
		a.current = nil
	}
	a.runsDone++
	stopping, registered := a.stopping, a.registered
	a.mu.Unlock()
	switch {
	case stopping:
	case registered:
		a.setState(StateIdle)
	default:
		a.setState(StateConnecting)
	}
}

// toProtocol converts the fingerprint (same JSON field names) and attaches
// the current state.
func toProtocol(fp *device.Fingerprint, st device.State) (*protocol.Fingerprint, error) {
	b, err := json.Marshal(fp)
	if err != nil {
		return nil, err
	}
	var out protocol.Fingerprint
	if err := json.Unmarshal(b, &out); err != nil {
		return nil, err
	}
	out.State = toProtocolState(st)
	return &out, nil
}

func toProtocolState(st device.State) *protocol.DeviceState {
	b, _ := json.Marshal(st)
	var out protocol.DeviceState
	_ = json.Unmarshal(b, &out)
	return &out
}
