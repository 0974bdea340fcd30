package bench

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"time"

	"github.com/lesfarm/lesfarm/runtime/expert"
	"github.com/lesfarm/lesfarm/runtime/generate"
	"github.com/lesfarm/lesfarm/runtime/les"
	"github.com/lesfarm/lesfarm/runtime/measure"
	"github.com/lesfarm/lesfarm/runtime/moe"
	"github.com/lesfarm/lesfarm/runtime/units"
)

// ReplayConfig configures RunReplay: the ladder's storage, budget and modes,
// with the model's compute replaced by a fixed emulated cost.
type ReplayConfig struct {
	LadderConfig
	// Compute is the emulated compute time of one decoded token (required):
	// AttentionShare of it is spread over the layers' attention, the rest
	// over the experts each layer uses.
	Compute        time.Duration
	AttentionShare float64 // default 0.2
}

// RunReplay records the real model's routing and lookahead predictions in
// one greedy run, then replays the decode steps through a store in each
// mode, with compute emulated by precise sleeps: attention of layer l, the
// prefetch for layer l+1, then Use of layer l with each expert costing its
// share. It measures what the scheduling achieves on a device whose compute
// takes cfg.Compute per token, independent of this machine's CPU speed and
// load. There are no output tokens: IdenticalOutput reports that every
// replayed demand was served with an expert of the right size.
func RunReplay(ctx context.Context, cfg ReplayConfig) (*LadderReport, error) {
	if err := cfg.defaults(); err != nil {
		return nil, err
	}
	if cfg.Compute <= 0 {
		return nil, errors.New("bench: replay needs a positive compute time per token")
	}
	if cfg.AttentionShare == 0 {
		cfg.AttentionShare = 0.2
	}
	if cfg.AttentionShare < 0 || cfg.AttentionShare >= 1 {
		return nil, errors.New("bench: attention share must be in [0, 1)")
	}
	progress := func(format string, args ...any) {
		if cfg.Progress != nil {
			cfg.Progress(fmt.Sprintf(format, args...))
		}
	}
	rep := &LadderReport{Model: cfg.Model, Threads: cfg.Threads}
	storage := "direct"
	if !cfg.Direct {
		storage = cfg.Profile.Name
	}
	rep.Profile = fmt.Sprintf("%s (replay, emulated compute %v/token)", storage, cfg.Compute)

	// Record one greedy run with every expert resident in the store.
	// A budget of every expert's bytes holds them all (the file at its
	// real speed reads unpadded buffers), so nothing is evicted.
	ses, err := measure.OpenSession(measure.Config{Model: cfg.Model, ExpertsPath: cfg.ExpertsPath, Mode: expert.Lookahead,
		Budget: units.Budget{Fraction: 1}, Record: true, Threads: cfg.Threads})
	if err == nil && ses.Store == nil { // a dense model loads without a store
		ses.Close()
		err = les.ErrNotMoE
	}
	if errors.Is(err, les.ErrNotMoE) {
		return nil, fmt.Errorf("bench: %s is not a Mixture-of-Experts model", cfg.Model)
	}
	if err != nil {
		return nil, err
	}
	m, base := ses.Model, ses.Store
	rep.ExpertBytes, rep.ResidentBytes = ses.ExpertBytes, m.ResidentBytes
	var layers int
	for _, b := range base.Info().ExpertBytes {
		if b > 0 {
			layers++
		}
	}
	prompt := ladderPrompt(cfg.PromptTokens, m.Vocab)
	var first int
	firstToken := true
	if _, err := generate.Run(ctx, m, generate.Params{PromptIDs: prompt, MaxTokens: cfg.GenTokens, OnToken: func(int) error {
		if firstToken {
			firstToken = false
			first = len(base.Meter().Recorded().Calls)
		}
		return nil
	}}); err != nil {
		ses.Close()
		return nil, err
	}
	calls := base.Meter().Recorded().Calls[first:]
	ses.Close()
	budget := cfg.Budget.Resolve(rep.ExpertBytes)
	rep.BudgetBytes = budget
	tokens := cfg.GenTokens - 1
	attn := time.Duration(float64(cfg.Compute) * cfg.AttentionShare / float64(layers))
	progress("recorded %d decode steps (%d calls); emulated compute %v/token, attention %v/layer", tokens, len(calls), cfg.Compute, attn)

	uses := &expert.RoutingTrace{}
	for range cfg.Warmup + cfg.Repetitions {
		for _, c := range calls {
			if !c.Prefetch {
				uses.Calls = append(uses.Calls, c)
			}
		}
	}
	type loaded struct {
		mode  expert.Mode
		store *expert.Store
		r     *ladderRun
	}
	var all []*loaded
	defer func() {
		for _, l := range all {
			l.store.Close()
		}
	}()
	modes := cfg.Modes
	if !cfg.NoOracle {
		modes = append(modes[:len(modes):len(modes)], expert.OracleMode)
	}
	for _, mode := range modes {
		s, err := base.Clone(expert.Options{Mode: mode, Budget: budget, Policy: cfg.Policy, Profile: cfg.Profile, Direct: cfg.Direct, Trace: uses, PrefetchAll: cfg.PrefetchAll})
		if err != nil {
			return nil, fmt.Errorf("bench: %s: %w", mode, err)
		}
		all = append(all, &loaded{mode: mode, store: s, r: &ladderRun{identical: true}})
	}
	for i := range cfg.Warmup + cfg.Repetitions {
		for _, l := range all {
			before := l.store.Meter().Stats()
			t0 := time.Now()
			ok, err := replay(ctx, l.store, calls, attn, cfg.Compute-time.Duration(layers)*attn, layers)
			if err != nil {
				return nil, fmt.Errorf("bench: replay %s: %w", l.mode, err)
			}
			d := time.Since(t0)
			l.r.identical = l.r.identical && ok
			if i < cfg.Warmup {
				continue
			}
			// A replayed repetition: one prompt's decode steps, in the
			// host's time of the emulated compute.
			l.r.reps = append(l.r.reps, les.Rep{Prompts: 1, DecodeTokens: tokens, Decode: d, HostDecode: d, Expert: l.store.Meter().Stats().Sub(before)})
		}
		progress("replay round %d/%d done", i+1, cfg.Warmup+cfg.Repetitions)
	}
	runs := map[expert.Mode]*ladderRun{}
	for _, l := range all {
		runs[l.mode] = l.r
		l.r.finish(&cfg.LadderConfig)
		l.r.progress(l.mode.String(), progress)
	}
	fillRows(rep, cfg.Modes, runs)
	return rep, nil
}

// replay drives s through the recorded calls: for each layer, the emulated
// attention, the recorded prefetch for the next layer (in lookahead modes),
// then Use with each expert's emulated compute.
func replay(ctx context.Context, s *expert.Store, calls []expert.TraceCall, attn, expertsPerToken time.Duration, layers int) (bool, error) {
	expert.PinThread()
	defer runtime.UnlockOSThread()
	ok := true
	attnDone := false
	// Emulated compute runs on a virtual timeline: consecutive compute
	// chunks follow each other's deadlines, so a sleep that ends late on a
	// loaded machine does not add up; the timeline restarts from now only
	// after the store made compute wait for a read.
	var deadline time.Time
	stall := s.Meter().Stall()
	compute := func(d time.Duration) {
		now := time.Now()
		if st := s.Meter().Stall(); st != stall || deadline.IsZero() {
			stall, deadline = st, now
		}
		deadline = deadline.Add(d)
		if w := time.Until(deadline); w > 0 {
			expert.Sleep(w)
		}
	}
	expertBytes := s.Info().ExpertBytes
	for i, c := range calls {
		if c.Prefetch {
			// The model predicts layer l+1 after layer l's attention.
			if i+1 < len(calls) && !calls[i+1].Prefetch && !attnDone {
				compute(attn)
				attnDone = true
			}
			if s.PredictK() > 0 {
				s.Prefetch(c.Layer, c.Experts)
			}
			continue
		}
		if !attnDone {
			compute(attn)
		}
		attnDone = false
		per := expertsPerToken / time.Duration(layers*len(c.Experts))
		want := expertBytes[c.Layer]
		err := s.Use(ctx, c.Layer, c.Experts, func(_ int, w moe.Weights) error {
			if n := int64(len(w.Gate) + len(w.Up) + len(w.Down)); n == 0 || n > want {
				ok = false
			}
			compute(per)
			return nil
		})
		if err != nil {
			return false, err
		}
	}
	return ok, nil
}
