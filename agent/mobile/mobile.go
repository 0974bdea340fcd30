// Package mobile is the gomobile facade of the agent: the API a phone app
// (Android via an AAR, iOS via an XCFramework) calls to run the farm agent
// in-process. It uses only types gobind supports: strings, numbers, bool,
// error, and the Listener interface the app implements.
//
// An app starts the agent with a JSON config, receives log lines and state
// changes through its Listener, polls Status for a JSON snapshot, and stops
// it when the app goes away:
//
//	a, err := mobile.Start(`{"nats_url":"nats://farm:4222","name":"pixel8-01","cache_dir":"/data/.../cache"}`, listener)
//	...
//	a.Status()  // {"state":"running","run_id":42,...}
//	a.Stop()
//
// See docs/agent.md for building the AAR/XCFramework with gomobile bind.
package mobile

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/lesfarm/lesfarm/agent"
	"github.com/lesfarm/lesfarm/agent/device"
	"github.com/lesfarm/lesfarm/protocol"
)

// Listener receives the agent's callbacks. The app implements it (a Java
// or Objective-C/Swift object). Calls come from agent goroutines, one at a
// time per Agent; implementations must return quickly (post to the UI
// thread rather than doing work).
type Listener interface {
	// OnLog receives one log line: level is DEBUG, INFO, WARN or ERROR.
	OnLog(level, message string)
	// OnState receives the agent state after each change: connecting, idle,
	// running, cut_off, stopping, stopped.
	OnState(state string)
}

// config is the JSON accepted by Start. Unknown keys are errors.
type config struct {
	NATSURL         string            `json:"nats_url"`
	Name            string            `json:"name"`
	CacheDir        string            `json:"cache_dir"`
	Labels          map[string]string `json:"labels"`
	CredsFile       string            `json:"creds_file"`
	NKeySeedFile    string            `json:"nkey_seed_file"`
	User            string            `json:"user"`
	Password        string            `json:"password"`
	Token           string            `json:"token"`
	TLSCAFile       string            `json:"tls_ca_file"`
	TLSCertFile     string            `json:"tls_cert_file"`
	TLSKeyFile      string            `json:"tls_key_file"`
	ArtifactToken   string            `json:"artifact_token"`
	Profile         string            `json:"profile"`
	Threads         int               `json:"threads"`
	CacheMaxBytes   int64             `json:"cache_max_bytes"`
	BufferMaxBytes  int64             `json:"buffer_max_bytes"`
	BatchMS         int               `json:"batch_ms"`
	BatchEvents     int               `json:"batch_events"`
	ThermalMaxC     float64           `json:"thermal_max_c"`
	ThermalTimeoutS float64           `json:"thermal_timeout_s"`
	NoThermalGate   bool              `json:"no_thermal_gate"`
	LogLevel        string            `json:"log_level"`
}

// Agent is a running agent. Its methods are safe for concurrent use.
type Agent struct {
	a      *agent.Agent
	cancel context.CancelFunc
	done   chan struct{}
	mu     sync.Mutex
	err    error
}

// Start parses configJSON, starts the agent in the background and returns
// at once. It fails on a malformed config (unknown keys, missing nats_url,
// name or cache_dir). listener may be nil.
func Start(configJSON string, listener Listener) (*Agent, error) {
	cfg, level, err := parseConfig(configJSON)
	if err != nil {
		return nil, err
	}
	if listener != nil {
		mu := &sync.Mutex{} // one callback at a time
		cfg.Logger = slog.New(&logHandler{l: listener, level: level, mu: mu})
		cfg.OnState = func(st string) {
			mu.Lock()
			defer mu.Unlock()
			listener.OnState(st)
		}
	} else {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	a, err := agent.New(cfg)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	m := &Agent{a: a, cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(m.done)
		defer func() {
			if p := recover(); p != nil {
				m.setErr(fmt.Errorf("agent crashed: %v", p))
				if listener != nil {
					listener.OnLog("ERROR", fmt.Sprintf("agent crashed: %v", p))
					listener.OnState(agent.StateStopped)
				}
			}
		}()
		if err := a.Run(ctx); err != nil {
			m.setErr(err)
			if listener != nil {
				listener.OnLog("ERROR", err.Error())
			}
		}
	}()
	return m, nil
}

func parseConfig(s string) (agent.Config, slog.Level, error) {
	var c config
	dec := json.NewDecoder(strings.NewReader(s))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&c); err != nil {
		return agent.Config{}, 0, fmt.Errorf("mobile: config JSON: %w", err)
	}
	if c.CacheDir == "" {
		return agent.Config{}, 0, errors.New("mobile: config: cache_dir is required (use the app's cache or files directory)")
	}
	var level slog.Level
	if c.LogLevel != "" {
		if err := level.UnmarshalText([]byte(c.LogLevel)); err != nil {
			return agent.Config{}, 0, fmt.Errorf("mobile: config: log_level %q invalid (debug, info, warn, error)", c.LogLevel)
		}
	}
	if c.BatchMS < 0 || c.ThermalTimeoutS < 0 {
		return agent.Config{}, 0, errors.New("mobile: config: batch_ms and thermal_timeout_s must not be negative")
	}
	return agent.Config{
		// A phone app cannot exec downloaded code: it runs its embedded
		// build, registered as embedded-<revision or sha256>.
		NoExec:  true,
		NATSURL: c.NATSURL, Name: c.Name, CacheDir: c.CacheDir, Labels: c.Labels,
		CredsFile: c.CredsFile, NKeySeedFile: c.NKeySeedFile, User: c.User, Password: c.Password, Token: c.Token,
		TLSCAFile: c.TLSCAFile, TLSCertFile: c.TLSCertFile, TLSKeyFile: c.TLSKeyFile, ArtifactToken: c.ArtifactToken,
		Profile: c.Profile, Threads: c.Threads, CacheMaxBytes: c.CacheMaxBytes, BufferMaxBytes: c.BufferMaxBytes,
		BatchInterval: time.Duration(c.BatchMS) * time.Millisecond, BatchEvents: c.BatchEvents,
		Gate: agent.ThermalGate{MaxTempC: c.ThermalMaxC, Timeout: time.Duration(c.ThermalTimeoutS * float64(time.Second)), Disabled: c.NoThermalGate},
	}, level, nil
}

func (m *Agent) setErr(err error) {
	m.mu.Lock()
	m.err = err
	m.mu.Unlock()
}

// Stop shuts the agent down gracefully (the current run is aborted and
// reported, telemetry flushed) and waits for it, at most timeoutSeconds
// (<= 0 means 30). It returns the error the agent stopped with, if any.
func (m *Agent) Stop(timeoutSeconds int) error {
	if m == nil || m.a == nil {
		return nil // a zero Agent (constructed by the app, not Start) never ran
	}
	m.cancel()
	if timeoutSeconds <= 0 {
		timeoutSeconds = 30
	}
	select {
	case <-m.done:
	case <-time.After(time.Duration(timeoutSeconds) * time.Second):
		return errors.New("mobile: agent did not stop in time; it keeps shutting down in the background")
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.err
}

// Running reports whether the agent has not stopped yet.
func (m *Agent) Running() bool {
	if m == nil || m.a == nil {
		return false
	}
	select {
	case <-m.done:
		return false
	default:
		return true
	}
}

// Status returns the agent's status as JSON: state, device_id, connected,
// registered, run_id, run_state, progress, runs_done, last_error and the
// telemetry counters.
func (m *Agent) Status() string {
	if m == nil || m.a == nil {
		return `{"state":"stopped"}`
	}
	b, _ := json.Marshal(m.a.Status())
	return string(b)
}

// Fingerprint returns the device fingerprint the agent registers with, as
// JSON.
func (m *Agent) Fingerprint() string {
	if m == nil || m.a == nil {
		return "{}"
	}
	return fingerprintJSON(m.a.Fingerprint())
}

// DeviceFingerprint reads this device's fingerprint without starting an
// agent (for an app's "about this device" screen); storageDir is the
// directory whose free space is reported.
func DeviceFingerprint(storageDir string) string {
	return fingerprintJSON(device.Read(device.Options{StoragePath: storageDir}))
}

// Version returns the agent's build (module version and VCS revision).
func Version() string { return device.Build() }

// logHandler forwards slog records to the Listener as one line each.
type logHandler struct {
	l      Listener
	level  slog.Level
	attrs  []slog.Attr
	prefix string
	mu     *sync.Mutex
}

func (h *logHandler) Enabled(_ context.Context, lv slog.Level) bool { return lv >= h.level }

func (h *logHandler) Handle(_ context.Context, r slog.Record) error {
	var b bytes.Buffer
	b.WriteString(r.Message)
	write := func(a slog.Attr) bool {
		fmt.Fprintf(&b, " %s%s=%v", h.prefix, a.Key, a.Value.Resolve())
		return true
	}
	for _, a := range h.attrs {
		write(a)
	}
	r.Attrs(write)
	if h.mu == nil {
		h.l.OnLog(r.Level.String(), b.String())
		return nil
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	h.l.OnLog(r.Level.String(), b.String())
	return nil
}

func (h *logHandler) WithAttrs(as []slog.Attr) slog.Handler {
	c := *h
	c.attrs = append(append([]slog.Attr(nil), h.attrs...), as...)
	return &c
}

func (h *logHandler) WithGroup(name string) slog.Handler {
	c := *h
	c.prefix = h.prefix + name + "."
	return &c
}

// fingerprintJSON encodes a fingerprint for the app; "{}" if it cannot be
// encoded (a NaN temperature), which an app shows as unknown.
func fingerprintJSON(fp *protocol.Fingerprint) string {
	b, err := json.Marshal(fp)
	if err != nil {
		return "{}"
	}
	return string(b)
}
