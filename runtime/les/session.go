// Package les is the one measurement path of the LES runtime. A Session
// opens a model and its expert store for a mode, budget and storage; its
// Repetition runs the prompts once and returns the raw counters (Rep), and
// Measure turns repetitions into a Result whose every metric is defined
// once, in result.go. The agent, lesfarm bench (plain and --ladder) and
// lesfarm generate all measure through it, so a number in Postgres means
// what lesfarm bench prints for the same configuration.
package les

import (
	"cmp"
	"errors"
	"fmt"
	"log/slog"
	"runtime"

	"github.com/lesfarm/lesfarm/runtime/expert"
	"github.com/lesfarm/lesfarm/runtime/gguf"
	"github.com/lesfarm/lesfarm/runtime/model"
	"github.com/lesfarm/lesfarm/runtime/moe"
	"github.com/lesfarm/lesfarm/runtime/units"
)

// Config says what a Session opens. The zero value of every optional field
// is the default noted.
type Config struct {
	// Model is the GGUF path (required): resident weights, and experts
	// unless ExpertsPath.
	Model string
	// ExpertsPath, if set, is the file experts are streamed from (the
	// packed form of Model). The naive mode ignores it: it reads the model
	// file as it is, as mmap would.
	ExpertsPath string
	// Resident holds every expert in RAM (no store); the expert fields
	// below are then ignored.
	Resident bool
	// Mode is the store's scheduling mode (streaming only).
	Mode expert.Mode
	// Budget is the expert cache budget (required when streaming): bytes,
	// or a fraction of BudgetBase.
	Budget units.Budget
	// BudgetBase is the expert bytes a fractional budget is a fraction of;
	// 0 means the loaded model's (a mixed-precision model passes its
	// original's, so every rung gets the same cache bytes).
	BudgetBase int64
	// Profile emulates a device's storage; nil reads the file at its real
	// speed (with Direct: the disk with O_DIRECT).
	Profile *expert.Profile
	Direct  bool
	// DeviceTime runs the emulated flash on the profile's device clock
	// (expert.Options.DeviceTime): decode figures are then device time.
	DeviceTime      bool
	ComputeSlowdown float64 // test hook, see expert.Options
	Policy          string  // cache policy (default: the store's, lfu)
	PredictK        int     // experts predicted per token (0: the store's default)
	PrefetchAll     bool    // see expert.Options.PrefetchAll
	NoLookahead     bool    // see expert.Options.NoLookahead
	// Record makes the store record its routing (Store.Meter().Recorded);
	// Trace is the routing the oracle mode replays.
	Record bool
	Trace  *expert.RoutingTrace
	// Threads for matrix products; 0 means runtime.NumCPU().
	Threads int
	Logger  *slog.Logger
	// RSSBase is the process RSS the session's peak RSS is counted from;
	// 0 means the RSS when it opens (see PeakRSS).
	RSSBase int64
}

// Session is a loaded model with its expert store, ready to measure. It is
// not safe for concurrent use: a device measures one thing at a time.
type Session struct {
	Model *model.Model
	// Store is the expert store; nil when every expert is resident.
	Store *expert.Store
	// Budget is the resolved expert budget in bytes (0 when resident).
	Budget int64
	// ExpertBytes is the loaded model's expert bytes.
	ExpertBytes int64
	// Storage names where experts come from: "resident", "direct", a
	// profile's name, or "file" (the file at its real speed).
	Storage string

	cfg Config
	dec Decoder
	rss RSSMeter
}

// ErrNotMoE is returned (wrapped) by Open for a streaming mode on a model
// without experts.
var ErrNotMoE = errors.New("not a mixture-of-experts model")

// Open loads cfg.Model with its expert store. Its errors wrap
// model.ErrUnsupported, expert.ErrBudgetTooSmall or ErrNotMoE where they
// apply.
func Open(cfg Config) (*Session, error) {
	if cfg.Model == "" {
		return nil, errors.New("les: no model given")
	}
	if !cfg.Resident && cfg.Budget.IsZero() {
		return nil, fmt.Errorf("les: mode %s streams experts and needs a budget (bytes, or a fraction of the expert bytes)", cfg.Mode)
	}
	s := &Session{cfg: cfg, Storage: "resident", rss: StartRSS(cfg.RSSBase)}
	opts := model.Options{Threads: cmp.Or(cfg.Threads, runtime.NumCPU())}
	if !cfg.Resident {
		s.Storage = "file"
		switch {
		case cfg.Direct && cfg.Profile == nil:
			s.Storage = "direct"
		case cfg.Profile != nil:
			s.Storage = cfg.Profile.Name
		}
		expertsPath := cfg.ExpertsPath
		if cfg.Mode == expert.Naive {
			expertsPath = "" // mmap-like: the file as it is, not a packed copy
		}
		opts.Experts = func(f *gguf.File, shapes []moe.LayerShape) (moe.Source, error) {
			for _, sh := range shapes {
				s.ExpertBytes += sh.Bytes() * int64(sh.Experts)
			}
			if s.ExpertBytes == 0 {
				return nil, fmt.Errorf("les: mode %s: %s is %w: it has no experts to stream", cfg.Mode, cfg.Model, ErrNotMoE)
			}
			s.Budget = cfg.Budget.Resolve(cmp.Or(cfg.BudgetBase, s.ExpertBytes))
			st, err := expert.Open(cfg.Model, f, shapes, expertsPath, expert.Options{
				Mode: cfg.Mode, Budget: s.Budget, Policy: cfg.Policy, Profile: cfg.Profile, Direct: cfg.Direct,
				Record: cfg.Record, Trace: cfg.Trace, PredictK: cfg.PredictK, PrefetchAll: cfg.PrefetchAll, NoLookahead: cfg.NoLookahead,
				DeviceTime: cfg.DeviceTime, ComputeSlowdown: cfg.ComputeSlowdown, Logger: cfg.Logger,
			})
			s.Store = st
			return st, err
		}
	}
	m, err := model.Load(cfg.Model, opts)
	if err != nil {
		return nil, err
	}
	s.Model = m
	if cfg.Resident {
		s.ExpertBytes = m.ExpertBytes
	}
	s.dec = &plainDecoder{m: m}
	return s, nil
}

// Close releases the model and its store.
func (s *Session) Close() {
	if s.Model != nil {
		s.Model.Close()
	}
}

// DeviceTime reports whether the session's decode figures are device time.
func (s *Session) DeviceTime() bool { return s.Store != nil && s.Store.Clock() != nil }

// PeakRSS is the session's peak RSS: the process RSS it counts from
// (Config.RSSBase, else the RSS when it opened) plus how far the process's
// peak RSS rose above the RSS at its opening, up to now. Measured alone, it
// is the process's peak RSS; loaded beside other sessions (the ladder), it
// charges each session only its own growth.
func (s *Session) PeakRSS() int64 { return s.rss.Peak() }

// SetDecoder replaces plain decoding (the default) with d, e.g. a
// *Speculative.
func (s *Session) SetDecoder(d Decoder) { s.dec = d }
