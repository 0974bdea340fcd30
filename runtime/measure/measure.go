// Package measure is the one recipe for running a benchmark config: from
// a Config (model, mode, budget, storage, time base) it builds the expert
// store, the emulated device and its clock, and the measurement session
// (Open), and measures a plan on it (Session.Run). The agent's runner (in
// process and in a build's runner child alike), bench and generate all
// open their sessions here, so a budget takes one route to the store, the
// device clock is chosen by one rule (Config.DeviceTime) and every figure
// of a run — the result's stall fraction and the per-step timeline the
// drill-down draws — is on that one clock.
package measure

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/lesfarm/lesfarm/runtime/expert"
	"github.com/lesfarm/lesfarm/runtime/les"
	"github.com/lesfarm/lesfarm/runtime/model"
	"github.com/lesfarm/lesfarm/runtime/spec"
	"github.com/lesfarm/lesfarm/runtime/tokenizer"
	"github.com/lesfarm/lesfarm/runtime/trace"
	"github.com/lesfarm/lesfarm/runtime/units"
)

// TimeBase says which clock a config's decode figures are on.
type TimeBase string

// Time bases (Config.Time).
const (
	// TimeAuto is the device clock when the config emulates a device that
	// declares its compute (a profile with a compute: section, not direct
	// reads), else the host clock.
	TimeAuto TimeBase = ""
	// TimeDevice requires the device clock; Resolve fails without a
	// profile that declares its compute.
	TimeDevice TimeBase = "device"
	// TimeHost keeps the host's wall clock even for such a profile.
	TimeHost TimeBase = "host"
)

// ParseTime parses a --time flag: "", "device" or "host".
func ParseTime(s string) (TimeBase, error) {
	switch t := TimeBase(strings.TrimSpace(s)); t {
	case TimeAuto, TimeDevice, TimeHost:
		return t, nil
	}
	return "", fmt.Errorf("time base %q is not supported: use device or host", s)
}

// Config is one benchmark config. The zero value is not usable: Model is
// required, and a streaming mode (Resident false) needs a Budget.
type Config struct {
	// Model is the GGUF path; ExpertsPath, if set, its packed form that
	// experts are streamed from.
	Model, ExpertsPath string
	// Resident holds every expert in RAM (no store); the expert fields
	// below are then ignored.
	Resident bool
	// Mode is the store's scheduling mode.
	Mode expert.Mode
	// Budget is the expert cache budget: bytes, or a fraction of
	// BudgetBase (0: the loaded model's expert bytes). Every caller's
	// budget flag or job field reaches the store through this field.
	Budget     units.Budget
	BudgetBase int64
	// Profile emulates a device's storage (and, with a compute section,
	// its clock); nil reads the file at its real speed, with Direct the
	// disk with O_DIRECT.
	Profile *expert.Profile
	Direct  bool
	// Time picks the clock (TimeAuto by default).
	Time TimeBase
	// Speculative decodes with the n-gram drafter and adaptive k on the
	// store (the farm's speculative mode); the greedy tokens are plain
	// decoding's.
	Speculative bool

	Policy          string  // cache policy (default: the store's)
	PredictK        int     // experts predicted per token (0: the store's default)
	PrefetchAll     bool    // expert.Options.PrefetchAll
	NoLookahead     bool    // expert.Options.NoLookahead
	ComputeSlowdown float64 // test hook, expert.Options.ComputeSlowdown
	// Record records the routing (Store.Meter().Recorded); Trace is the
	// routing the oracle mode replays.
	Record bool
	Trace  *expert.RoutingTrace
	// Threads for matrix products; 0 means runtime.NumCPU().
	Threads int
	// RSSBase is the RSS the session's peak counts from (les.Config).
	RSSBase int64
	Logger  *slog.Logger
}

// DeviceTime reports whether the config runs on the device clock: the one
// rule every command and the agent share. It fails for TimeDevice without
// a profile that declares its compute.
func (c *Config) DeviceTime() (bool, error) {
	emulated := !c.Resident && c.Profile != nil && !c.Direct
	declares := emulated && c.Profile.Compute != nil
	switch c.Time {
	case TimeAuto:
		return declares, nil
	case TimeHost:
		return false, nil
	case TimeDevice:
		if !declares {
			name := "direct storage"
			switch {
			case c.Resident:
				name = "the resident mode"
			case c.Profile != nil && !c.Direct:
				name = "profile " + c.Profile.Name
			}
			return false, fmt.Errorf("device time needs a profile with a compute: section (weight_bandwidth, throughput); %s has none", name)
		}
		return true, nil
	}
	return false, fmt.Errorf("time base %q is not supported: use device or host", c.Time)
}

// Resolve returns the les.Config of c: the store's options, the storage
// and the clock.
func (c *Config) Resolve() (les.Config, error) {
	dt, err := c.DeviceTime()
	if err != nil {
		return les.Config{}, err
	}
	return les.Config{
		Model: c.Model, ExpertsPath: c.ExpertsPath, Resident: c.Resident, Mode: c.Mode, Budget: c.Budget, BudgetBase: c.BudgetBase,
		Profile: c.Profile, Direct: c.Direct, DeviceTime: dt, ComputeSlowdown: c.ComputeSlowdown, Policy: c.Policy,
		PredictK: c.PredictK, PrefetchAll: c.PrefetchAll, NoLookahead: c.NoLookahead, Record: c.Record, Trace: c.Trace,
		Threads: c.Threads, Logger: c.Logger, RSSBase: c.RSSBase,
	}, nil
}

// Session is an opened config: the les.Session with its store and clock,
// and the model's tokenizer. It is not safe for concurrent use.
type Session struct {
	*les.Session
	Tok *tokenizer.Tokenizer
}

// ErrNoTokenizer is returned (wrapped) by Open for a model whose GGUF has
// no usable tokenizer.
var ErrNoTokenizer = errors.New("no usable tokenizer")

// OpenSession loads c's model with its expert store, the emulated device
// and its clock, as Open does, but without the tokenizer and the
// speculative decoder: the constructor for callers that feed token ids
// themselves (bench's resident rows, the ladder's reference and replay, the
// streamed-compute probe). Every les.Session a benchmark measures is built
// here or by Open. Its errors wrap model.ErrUnsupported,
// expert.ErrBudgetTooSmall or les.ErrNotMoE where they apply.
func OpenSession(c Config) (*les.Session, error) {
	lc, err := c.Resolve()
	if err != nil {
		return nil, err
	}
	return les.Open(lc)
}

// Open loads c's model with its expert store on its clock, and its
// tokenizer (OpenSession plus the tokenizer and, with c.Speculative, the
// speculative decoder). Its errors wrap model.ErrUnsupported,
// expert.ErrBudgetTooSmall, les.ErrNotMoE or ErrNoTokenizer where they
// apply.
func Open(c Config) (*Session, error) {
	ses, err := OpenSession(c)
	if err != nil {
		return nil, err
	}
	tok, err := tokenizer.FromGGUF(ses.Model.File)
	if err != nil {
		ses.Close()
		return nil, fmt.Errorf("%w: %w", ErrNoTokenizer, err)
	}
	if c.Speculative {
		dec, err := spec.NewWithDrafter(ses.Model, &spec.NGramDrafter{})
		if err != nil {
			ses.Close()
			return nil, err
		}
		ses.SetDecoder(&les.Speculative{Dec: dec, K: spec.AdaptiveMaxK, Adaptive: true})
	}
	return &Session{Session: ses, Tok: tok}, nil
}

// Unsupported reports whether err means the model cannot run at all (an
// architecture or tensor type the runtime lacks, or no tokenizer).
func Unsupported(err error) bool {
	return errors.Is(err, model.ErrUnsupported) || errors.Is(err, ErrNoTokenizer)
}

// Run measures p on the session (les.Session.Run). On the device clock,
// the decode and verify steps p.Sink sees carry the device's time and
// stall (Clock), so a timeline drawn from them splits decode time as the
// result's StallFraction does.
func (s *Session) Run(ctx context.Context, p les.Plan) (*les.Result, []les.Rep, error) {
	p.Sink = s.Clock(p.Sink)
	return s.Session.Run(ctx, p)
}

// Clock returns sink with the step times put on the session's clock: on
// the device clock, each decode and verify step's Duration is the
// device's time of that step (expert.Stats.DeviceTime) and its Stall the
// device's stall, the quantities les.Result's decode figures and
// StallFraction sum; each prefill step's is the device's time of its pass
// (expert.Stats.DevicePrefill), which les.Result's prefill figures sum.
// On the host clock, or for a nil sink, it returns sink.
func (s *Session) Clock(sink trace.Sink) trace.Sink {
	if sink == nil || !s.DeviceTime() {
		return sink
	}
	d := &deviceSink{Sink: sink, clock: s.Store.Clock()}
	d.compute, d.stall, d.prefill, d.prefillStall = d.totals()
	return d
}

// deviceSink rewrites token events onto the store's device clock.
type deviceSink struct {
	trace.Sink
	clock                 *expert.DeviceClock
	compute, stall        time.Duration // decode totals at the last step
	prefill, prefillStall time.Duration // prefill totals at the last step
}

// totals returns the clock's decode compute and stall (the store's
// Stats.DeviceCompute and DeviceStall) and its prefill time and stall.
func (d *deviceSink) totals() (compute, stall, prefill, prefillStall time.Duration) {
	compute, stall, _ = d.clock.Totals()
	prefill, prefillStall, _ = d.clock.PrefillTotals()
	return compute, stall, prefill, prefillStall
}

func (d *deviceSink) Token(ev *trace.TokenEvent) {
	compute, stall, prefill, prefillStall := d.totals()
	dc, ds := compute-d.compute, stall-d.stall
	dp, dps := prefill-d.prefill, prefillStall-d.prefillStall
	d.compute, d.stall, d.prefill, d.prefillStall = compute, stall, prefill, prefillStall
	if dc < 0 || ds < 0 || dp < 0 || dps < 0 { // the totals were reset
		d.Sink.Token(ev)
		return
	}
	e := *ev
	e.Duration, e.Stall = dc+ds, ds
	if ev.Phase == trace.Prefill {
		// A prefill chunk of one position is a counted pass.
		e.Duration, e.Stall = dp+dc+ds, dps+ds
	}
	d.Sink.Token(&e)
}
