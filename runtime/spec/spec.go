// Package spec runs speculative decoding in the LES runtime: a drafter (a
// small draft model, or the model-free n-gram prompt lookup) proposes up to
// K tokens, the target model checks them in one batched forward pass
// (logits for every position) and keeps the prefix it accepts, plus its own
// next token. Greedy, the generated tokens are exactly those of plain
// greedy decoding with the target (generate.Run with a zero sample.Params);
// only the number of target passes changes. With a temperature, the
// standard rejection rule (accept x with probability min(1, p(x)/q(x)),
// else draw from max(0, p−q)) keeps the target's sampling distribution.
// K is fixed, or chosen each round from measured acceptance and costs
// (Params.Adaptive, see controller); it is cut near the token limit and the
// context length so no pass does work that cannot be used.
package spec

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/lesfarm/lesfarm/runtime/generate"
	"github.com/lesfarm/lesfarm/runtime/internal/cputime"
	"github.com/lesfarm/lesfarm/runtime/model"
	"github.com/lesfarm/lesfarm/runtime/sample"
	"github.com/lesfarm/lesfarm/runtime/trace"
)

// DefaultK is the number of draft tokens per round when Params.K is 0.
const DefaultK = 4

// MaxK bounds Params.K (a verify pass has K+1 positions).
const MaxK = 64

// AdaptiveMaxK is the largest draft length adaptive k tries by default.
const AdaptiveMaxK = 8

// ErrVocabMismatch is returned (wrapped) when the draft and target models
// do not share a vocabulary.
var ErrVocabMismatch = errors.New("draft and target vocabularies differ")

// Params configures Run.
type Params struct {
	// PromptIDs is the tokenized prompt (at least one token).
	PromptIDs []int
	// MaxTokens is the number of tokens to generate at most (> 0).
	MaxTokens int
	// K is the number of tokens the draft proposes per round (default
	// DefaultK, at most MaxK); with Adaptive, the largest length tried.
	K int
	// Adaptive chooses the draft length of each round in [0, K] from the
	// measured acceptance and pass costs; 0 turns speculation off for the
	// round (see controller).
	Adaptive bool
	// Sampling is the target's sampling (zero: greedy). The drafter
	// samples with the same parameters, and the rejection rule keeps the
	// target's distribution.
	Sampling sample.Params
	// IsEOG reports end-of-generation tokens; nil never stops early.
	IsEOG func(id int) bool
	// Sink receives the target's token and layer events: one Prefill event
	// per prompt batch, then one Verify event per round (or a Decode event
	// when the round drafted nothing). nil discards.
	Sink trace.Sink
	// Batch is the prefill batch size (default generate.DefaultBatch).
	Batch int
	// OnToken, if set, is called with each generated token in order (the
	// accepted tokens of a round one after the other). An error stops
	// generation.
	OnToken func(id int) error
	// CutVerify, for a target whose experts stream (a moe.Residency
	// source), ends a verify pass at the first drafted position that would
	// read an expert the positions before it do not need
	// (model.State.CutVerify): drafts then ride only on experts that are
	// resident or read anyway, the rest of the round's drafts go
	// unverified, and the output is unchanged. Greedy decoding only (with
	// sampling it is ignored: a cut that depends on the drafted tokens
	// would bias the rejection rule).
	CutVerify bool
	// CutSlack is model.State.CutSlack for CutVerify: the new expert
	// reads per layer a drafted position may add and still be verified.
	CutSlack int
}

// Stats are the speculative counters of one generation.
type Stats struct {
	K        int // draft tokens per round asked for
	Rounds   int // target verification passes after the prompt
	Drafted  int // draft tokens proposed
	Accepted int // draft tokens the target agreed with
	// Generated is the number of tokens the rounds produced (accepted +
	// one target token per round, minus tokens dropped by a stop).
	Generated int
	// Histogram[i] counts rounds that accepted i draft tokens (0..K).
	Histogram []int
	// DraftTime is the draft model's forward time (its prompt included);
	// TargetTime the target's verification time.
	DraftTime, TargetTime time.Duration
	// Drafter names the drafter ("model", "ngram"); Adaptive is
	// Params.Adaptive.
	Drafter  string
	Adaptive bool
	// Off counts rounds in which the adaptive choice was plain decoding
	// (k = 0); Empty counts rounds whose drafter had nothing to propose.
	Off, Empty int
	// VerifyPositions sums the positions of all target passes; VerifyTime
	// is their time (TargetTime), so VerifyTime/Rounds is the mean verify
	// cost.
	VerifyPositions int
	// Cut counts drafted positions that Params.CutVerify left unverified
	// (not in Drafted or VerifyPositions).
	Cut int
	// ExpertsPerVerify sums, over target passes, the (layer, expert) pairs
	// the pass's positions routed to (the union a streaming mode reads or
	// finds cached), for MoE targets.
	ExpertsPerVerify int
}

// Add accumulates o's counters and times into s (several generations).
func (s *Stats) Add(o *Stats) {
	s.Rounds += o.Rounds
	s.Drafted += o.Drafted
	s.Accepted += o.Accepted
	s.Generated += o.Generated
	s.DraftTime += o.DraftTime
	s.TargetTime += o.TargetTime
	s.Off += o.Off
	s.Empty += o.Empty
	s.VerifyPositions += o.VerifyPositions
	s.Cut += o.Cut
	s.ExpertsPerVerify += o.ExpertsPerVerify
}

// MeanAccepted is Accepted / rounds that drafted (the accepted length).
func (s *Stats) MeanAccepted() float64 {
	r := s.Rounds - s.Off - s.Empty
	if r <= 0 {
		return 0
	}
	return float64(s.Accepted) / float64(r)
}

// MeanVerify is TargetTime / Rounds.
func (s *Stats) MeanVerify() time.Duration {
	if s.Rounds == 0 {
		return 0
	}
	return s.TargetTime / time.Duration(s.Rounds)
}

// MeanExpertsPerVerify is ExpertsPerVerify / Rounds.
func (s *Stats) MeanExpertsPerVerify() float64 {
	if s.Rounds == 0 {
		return 0
	}
	return float64(s.ExpertsPerVerify) / float64(s.Rounds)
}

// AcceptanceRate is Accepted / Drafted (0 without drafts).
func (s *Stats) AcceptanceRate() float64 {
	if s.Drafted == 0 {
		return 0
	}
	return float64(s.Accepted) / float64(s.Drafted)
}

// TokensPerTargetPass is Generated / Rounds: how many tokens each target
// pass yields (1 for plain decoding).
func (s *Stats) TokensPerTargetPass() float64 {
	if s.Rounds == 0 {
		return 0
	}
	return float64(s.Generated) / float64(s.Rounds)
}

// Result is a generation (the fields of generate.Result) with its
// speculative statistics. Decode is the wall time of all rounds, draft
// and verification included; DecodeSteps is the number of tokens they
// produced (generated tokens minus the first), so DecodeTokensPerSecond
// compares directly with plain decoding.
type Result struct {
	generate.Result
	Spec Stats
}

// CheckVocab returns an error wrapping ErrVocabMismatch unless draft and
// target have the same vocabulary size and, when both files carry a
// tokenizer, the same tokens.
func CheckVocab(target, draft *model.Model) error {
	if target.Vocab != draft.Vocab {
		return fmt.Errorf("spec: %w: target has %d tokens, draft %d; use a draft trained with the target's tokenizer", ErrVocabMismatch, target.Vocab, draft.Vocab)
	}
	if target.File == nil || draft.File == nil {
		return nil
	}
	if target.File == draft.File {
		return nil
	}
	const key = "tokenizer.ggml.tokens"
	tt, err1 := target.File.Strings(key)
	dt, err2 := draft.File.Strings(key)
	if err1 != nil || err2 != nil {
		return nil //nolint:nilerr // no tokenizer to compare: sizes agree
	}
	if len(tt) != len(dt) {
		return fmt.Errorf("spec: %w: target tokenizer has %d tokens, draft %d; use a draft trained with the target's tokenizer", ErrVocabMismatch, len(tt), len(dt))
	}
	for i := range tt {
		if tt[i] != dt[i] {
			return fmt.Errorf("spec: %w: token %d is %q in the target, %q in the draft; use a draft trained with the target's tokenizer", ErrVocabMismatch, i, tt[i], dt[i])
		}
	}
	return nil
}

// Decoder is a target with a drafter and reusable KV caches, for repeated
// generations (benchmarks, serving). It is not safe for concurrent use.
type Decoder struct {
	target  *model.Model
	drafter Drafter
	ts      *model.State
	// union marks (layer, expert) pairs routed to in the current pass.
	union  []bool
	unionN int
	p      []float64
	qs     [][]float64
	mtp    *mtpDrafter // set by NewMTP (tests reach its override)
	// ctl is the adaptive controller of the last adaptive Run, kept so
	// that the next Run with the same K starts from what it measured.
	ctl *controller
}

// New checks that draft can draft for target (CheckVocab) and returns
// their Decoder, drafting with the model.
func New(target, draft *model.Model) (*Decoder, error) {
	d, err := NewModelDrafter(target, draft)
	if err != nil {
		return nil, err
	}
	return NewWithDrafter(target, d)
}

// NewWithDrafter returns a Decoder of target drafting with d (a
// ModelDrafter, an NGramDrafter, ...).
func NewWithDrafter(target *model.Model, d Drafter) (*Decoder, error) {
	if target == nil || d == nil {
		return nil, errors.New("spec: a target and a drafter are required")
	}
	return &Decoder{target: target, drafter: d}, nil
}

// Run generates from target with draft proposing tokens. Greedy, the
// tokens, and the stop reason, equal generate.Run's greedy output on
// target. It returns ctx's error when cancelled, with the partial result.
func Run(ctx context.Context, target, draft *model.Model, p Params) (*Result, error) {
	d, err := New(target, draft)
	if err != nil {
		return nil, err
	}
	return d.Run(ctx, p)
}

// onRoute counts the distinct (layer, expert) pairs of a pass.
func (dec *Decoder) onRoute(_, layer int, experts []int, _ []float32) {
	E := dec.target.ExpertCount
	for _, e := range experts {
		if i := layer*E + e; i < len(dec.union) && !dec.union[i] {
			dec.union[i] = true
			dec.unionN++
		}
	}
}

// Run is the package's Run on the decoder's target and drafter, reusing
// its caches.
func (dec *Decoder) Run(ctx context.Context, p Params) (*Result, error) {
	target := dec.target
	n := len(p.PromptIDs)
	k := p.K
	if k == 0 {
		k = DefaultK
	}
	switch {
	case n == 0:
		return nil, errors.New("spec: empty prompt: give at least one token")
	case n > target.Context:
		return nil, fmt.Errorf("spec: %w: %d tokens exceed the context length %d of the model; shorten the prompt", generate.ErrPromptTooLong, n, target.Context)
	case p.MaxTokens <= 0:
		return nil, fmt.Errorf("spec: max tokens %d must be > 0", p.MaxTokens)
	case k < 1 || k > MaxK:
		return nil, fmt.Errorf("spec: draft tokens per round %d must be in [1, %d]", k, MaxK)
	}
	var smp *sample.Sampler
	if p.Sampling != (sample.Params{}) {
		var err error
		if smp, err = sample.New(p.Sampling); err != nil {
			return nil, fmt.Errorf("spec: %w", err)
		}
		if smp.Greedy() {
			smp = nil
		}
	}
	batch := p.Batch
	if batch <= 0 {
		batch = generate.DefaultBatch
	}
	// Target capacity as in generate.Run; the stop test uses it the same way.
	tcap := min(n+p.MaxTokens, target.Context)
	var err error
	if dec.ts == nil || dec.ts.Cap() < tcap {
		if dec.ts, err = target.NewState(tcap); err != nil {
			return nil, fmt.Errorf("spec: %w", err)
		}
	}
	// The draft holds the sequence plus K-1 drafted tokens at most.
	dcap := tcap + k
	if err := dec.drafter.Start(dcap); err != nil {
		return nil, err
	}
	if md, ok := dec.drafter.(*ModelDrafter); ok {
		dcap = md.Cap()
	}
	ts := dec.ts
	ts.Reset()
	ts.Sink = p.Sink
	cut := p.CutVerify && smp == nil
	defer func() { ts.CutVerify = false }()
	if target.Experts != nil && ts.OnRoute == nil {
		dec.union = make([]bool, len(target.Layers)*target.ExpertCount+target.ExpertCount)
		ts.OnRoute = dec.onRoute
		defer func() { ts.OnRoute = nil }()
	}
	defer func() { ts.Sink = nil }()
	V := target.Vocab
	if smp != nil {
		dec.p = grow(dec.p, V)
		if len(dec.qs) < k {
			dec.qs = make([][]float64, k)
		}
		for i := range dec.qs[:k] {
			dec.qs[i] = grow(dec.qs[i], V)
		}
	}
	rep, _ := target.Experts.(generate.TokenReporter)
	// emit takes the store's reads and stall of the pass just made (the
	// controller weighs them in a streaming mode) and hands the event to
	// the sink.
	var ev trace.TokenEvent
	emit := func(step int, ph trace.Phase, pos, tokens int, d time.Duration) {
		ev = trace.TokenEvent{Step: step, Phase: ph, Pos: pos, Tokens: tokens, Duration: d}
		if rep != nil {
			rep.FillTokenEvent(&ev)
		}
		if p.Sink != nil {
			p.Sink.Token(&ev)
		}
	}

	res := &Result{Result: generate.Result{PromptIDs: p.PromptIDs, TokenIDs: make([]int, 0, p.MaxTokens)}}
	res.Spec = Stats{K: k, Histogram: make([]int, k+1), Drafter: dec.drafter.Name(), Adaptive: p.Adaptive}
	st := &res.Spec
	ctl := newController(k, p.Adaptive)
	if p.Adaptive {
		if dec.ctl != nil && dec.ctl.k == k {
			ctl = dec.ctl
		}
		dec.ctl = ctl
	}
	// seq is prompt + generated; the target caches seq[:len(seq)-1].
	seq := make([]int, n, n+p.MaxTokens)
	copy(seq, p.PromptIDs)

	start := time.Now()
	var logits []float32
	step := 0
	for pos := 0; pos < n; pos += batch {
		end := min(pos+batch, n)
		ts.Step = step
		t0 := time.Now()
		if logits, err = ts.Forward(ctx, p.PromptIDs[pos:end], false); err != nil {
			return res, fmt.Errorf("spec: prefill: %w", err)
		}
		d := time.Since(t0)
		res.Prefill += d
		emit(step, trace.Prefill, pos, end-pos, d)
		step++
		if err := dec.observe(ctx, seq, end, st); err != nil {
			return res, err
		}
	}
	// push appends a generated token and reports whether generation stops
	// (the same tests, in the same order, as generate.Run).
	push := func(id int) (bool, error) {
		if len(res.TokenIDs) == 0 {
			res.TTFT = time.Since(start)
		}
		res.TokenIDs = append(res.TokenIDs, id)
		seq = append(seq, id)
		if p.OnToken != nil {
			if err := p.OnToken(id); err != nil {
				return true, err
			}
		}
		switch {
		case p.IsEOG != nil && p.IsEOG(id):
			res.StopReason = generate.StopEOG
		case len(res.TokenIDs) >= p.MaxTokens:
			res.StopReason = generate.StopMaxTokens
		case len(seq)-1 >= tcap: // the target's cache is full
			res.StopReason = generate.StopContext
		}
		return res.StopReason != "", nil
	}
	first := 0
	if smp == nil {
		first = sample.Argmax(logits)
	} else {
		smp.Dist(logits, dec.p)
		first = smp.Draw(dec.p)
	}
	if stop, err := push(first); stop || err != nil {
		return res, err
	}
	if err := dec.observe(ctx, seq, n, st); err != nil {
		return res, err
	}
	drafts := make([]int, 0, k+1)
	met := newMeter(target.Experts)
	for {
		roundStart := time.Now()
		tpos := len(seq) - 1 // target cached positions
		// Cut K so the verify pass fits the target cache and every token
		// it could yield is within the token limit, and the draft's pass
		// fits its cache.
		want := ctl.next()
		if p.Adaptive && want == 0 {
			st.Off++
		}
		kr := max(0, min(want, p.MaxTokens-len(res.TokenIDs)-1, tcap-tpos-1, dcap-len(seq)+1))
		drafts = append(drafts[:0], seq[tpos])
		var draftTime, draftCPU time.Duration
		if kr > 0 {
			// Only the adaptive controller weighs the draft's CPU time,
			// and a model-free drafter's (a scan of the sequence, a few
			// µs) is its wall time: no clock system calls.
			cpu := p.Adaptive && !isModelFree(dec.drafter)
			t0, c0 := time.Now(), time.Duration(0)
			if cpu {
				c0 = cputime.Process()
			}
			prop, err := dec.drafter.Propose(ctx, seq, kr, smp, dec.qs)
			draftTime, draftCPU = time.Since(t0), time.Since(t0)
			if cpu {
				draftCPU = cpuSince(c0, t0)
			}
			st.DraftTime += draftTime
			if err != nil {
				res.Decode += time.Since(roundStart)
				return res, err
			}
			if len(prop) == 0 {
				st.Empty++
			}
			kr = min(kr, len(prop))
			drafts = append(drafts, prop[:kr]...)
		}
		// Verify all positions in one target pass.
		ts.Step = step
		if dec.union != nil {
			clear(dec.union)
			dec.unionN = 0
		}
		ts.CutVerify, ts.CutSlack = cut && kr > 0, p.CutSlack // never the prompt's passes
		met.begin(kr+1, p.Adaptive && ctl.wants(kr+1))
		logits, err = ts.Forward(ctx, drafts, kr > 0)
		ts.CutVerify = false
		d := met.end()
		st.TargetTime += d
		if err != nil {
			res.Decode += time.Since(roundStart)
			return res, fmt.Errorf("spec: verify: %w", err)
		}
		if kept := len(logits) / target.Vocab; kr > 0 && kept < kr+1 {
			// CutVerify ended the pass early: the drafts past it are
			// not verified this round.
			st.Cut += kr + 1 - kept
			kr = kept - 1
		}
		st.Rounds++
		st.Drafted += kr
		st.VerifyPositions += kr + 1
		st.ExpertsPerVerify += dec.unionN
		acc, next := dec.accept(logits, drafts, kr, smp)
		st.Accepted += acc
		st.Histogram[acc]++
		ph := trace.Verify
		if kr == 0 {
			ph = trace.Decode
		}
		emit(step, ph, tpos, kr+1, d)
		// The controller weighs the pass in the meter's clock: the device
		// clock in device time, else CPU time plus the wait for expert
		// reads (wall time on a shared machine also counts other
		// processes' turns, and one slow sample of a wide pass would keep
		// speculation off for many rounds).
		cost, stall := met.cost(ev.Stall)
		ctl.observe(round{proposed: kr, accepted: acc, positions: kr + 1, verify: cost, draft: draftCPU, bytes: ev.BytesRead, stall: stall})
		step++
		// Rewind the target and the drafter to the agreed sequence: the
		// target keeps seq[tpos] and the accepted drafts.
		ts.Truncate(tpos + 1 + acc)
		dec.drafter.Rewind(tpos + 1 + acc)
		stop := false
		for _, id := range append(drafts[1:1+acc], next) {
			st.Generated++
			if stop, err = push(id); stop || err != nil {
				break
			}
		}
		if !stop && err == nil {
			err = dec.observe(ctx, seq, tpos+1+acc, st)
		}
		res.Decode += time.Since(roundStart)
		res.DecodeSteps = len(res.TokenIDs) - 1
		if stop || err != nil {
			return res, err
		}
	}
}

// observe hands a drafter that reads the target's state (the MTP block)
// the pass just made; the target caches seq[:cached].
func (dec *Decoder) observe(ctx context.Context, seq []int, cached int, st *Stats) error {
	o, ok := dec.drafter.(targetObserver)
	if !ok {
		return nil
	}
	t0 := time.Now()
	err := o.observe(ctx, dec.ts, seq, cached)
	st.DraftTime += time.Since(t0)
	return err
}

// accept applies the acceptance rule to a verify pass over drafts (the
// last sequence token, then kr drafted tokens): greedy, the longest prefix
// equal to the target's argmax, then the target's argmax; sampling, the
// rejection rule, then a draw from the residual max(0, p−q) at the first
// rejection or from p after the last draft. It returns the accepted count
// and the round's own next token.
func (dec *Decoder) accept(logits []float32, drafts []int, kr int, smp *sample.Sampler) (int, int) {
	V := dec.target.Vocab
	if smp == nil {
		acc := 0
		for acc < kr && sample.Argmax(logits[acc*V:(acc+1)*V]) == drafts[acc+1] {
			acc++
		}
		return acc, sample.Argmax(logits[acc*V : (acc+1)*V])
	}
	p := dec.p
	det := dec.drafter.Deterministic()
	for i := 0; i < kr; i++ {
		smp.Dist(logits[i*V:(i+1)*V], p)
		x := drafts[i+1]
		qx := 1.0
		if !det {
			qx = dec.qs[i][x]
		}
		if qx > 0 && smp.Float64() < min(1, p[x]/qx) {
			continue
		}
		if det {
			p[x] = 0
		} else {
			for j, qj := range dec.qs[i][:V] {
				p[j] = max(0, p[j]-qj)
			}
		}
		return i, smp.Draw(p)
	}
	smp.Dist(logits[kr*V:(kr+1)*V], p)
	return kr, smp.Draw(p)
}

// cpuSince is the process CPU time since c0 (read at t0), or the wall
// time since t0 where there is no CPU clock.
func cpuSince(c0 time.Duration, t0 time.Time) time.Duration {
	if c0 == 0 {
		return time.Since(t0)
	}
	return cputime.Process() - c0
}

func grow[T any](b []T, n int) []T {
	if cap(b) < n {
		return make([]T, n)
	}
	return b[:n]
}
