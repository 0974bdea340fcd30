// Package spec runs greedy speculative decoding in the LES runtime: a small
// draft model proposes K tokens greedily, the target model checks them in
// one batched forward pass (logits for every position) and keeps the
// longest prefix it agrees with, plus its own next token. The generated
// tokens are exactly those of plain greedy decoding with the target
// (generate.Run with a zero sample.Params); only the number of target passes
// changes. K is fixed per run (no adaptive K); it is cut near the token
// limit and the context length so no pass does work that cannot be used.
package spec

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/lesfarm/lesfarm/runtime/generate"
	"github.com/lesfarm/lesfarm/runtime/model"
	"github.com/lesfarm/lesfarm/runtime/sample"
	"github.com/lesfarm/lesfarm/runtime/trace"
)

// DefaultK is the number of draft tokens per round when Params.K is 0.
const DefaultK = 4

// MaxK bounds Params.K (a verify pass has K+1 positions).
const MaxK = 64

// ErrVocabMismatch is returned (wrapped) when the draft and target models
// do not share a vocabulary.
var ErrVocabMismatch = errors.New("draft and target vocabularies differ")

// Params configures Run. Decoding is always greedy.
type Params struct {
	// PromptIDs is the tokenized prompt (at least one token).
	PromptIDs []int
	// MaxTokens is the number of tokens to generate at most (> 0).
	MaxTokens int
	// K is the number of tokens the draft proposes per round (default
	// DefaultK, at most MaxK).
	K int
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
		return nil // no tokenizer to compare: sizes agree
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

// Decoder is a checked target and draft pair with reusable KV caches, for
// repeated generations (benchmarks, serving). It is not safe for
// concurrent use.
type Decoder struct {
	target, draft *model.Model
	ts, ds        *model.State
	mtp           *mtpDrafter // drafting with the target's own MTP block (NewMTP)
}

// New checks that draft can draft for target (CheckVocab) and returns
// their Decoder.
func New(target, draft *model.Model) (*Decoder, error) {
	if target == nil || draft == nil {
		return nil, errors.New("spec: a target and a draft model are required")
	}
	if err := CheckVocab(target, draft); err != nil {
		return nil, err
	}
	return &Decoder{target: target, draft: draft}, nil
}

// Run generates greedily from target with draft proposing tokens. The
// tokens, and the stop reason, equal generate.Run's greedy output on
// target. It returns ctx's error when cancelled, with the partial result.
func Run(ctx context.Context, target, draft *model.Model, p Params) (*Result, error) {
	d, err := New(target, draft)
	if err != nil {
		return nil, err
	}
	return d.Run(ctx, p)
}

// Run is the package's Run on the decoder's pair, reusing its caches.
func (dec *Decoder) Run(ctx context.Context, p Params) (*Result, error) {
	target, draft := dec.target, dec.draft
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
	if dec.mtp != nil {
		return dec.runMTP(ctx, p, k, tcap)
	}
	dcap := min(tcap+k, draft.Context)
	if dec.ds == nil || dec.ds.Cap() < dcap {
		if dec.ds, err = draft.NewState(dcap); err != nil {
			return nil, fmt.Errorf("spec: draft: %w", err)
		}
	}
	ts, ds := dec.ts, dec.ds
	ts.Reset()
	ds.Reset()
	ts.Sink = p.Sink
	defer func() { ts.Sink = nil }()
	rep, _ := target.Experts.(generate.TokenReporter)
	emit := func(step int, ph trace.Phase, pos, tokens int, d time.Duration) {
		if p.Sink == nil {
			return
		}
		ev := trace.TokenEvent{Step: step, Phase: ph, Pos: pos, Tokens: tokens, Duration: d}
		if rep != nil {
			rep.FillTokenEvent(&ev)
		}
		p.Sink.Token(&ev)
	}

	res := &Result{Result: generate.Result{PromptIDs: p.PromptIDs, TokenIDs: make([]int, 0, p.MaxTokens)}}
	res.Spec = Stats{K: k, Histogram: make([]int, k+1)}
	st := &res.Spec
	// seq is prompt + generated; the target caches seq[:len(seq)-1], the
	// draft seq[:ds.Pos()] (plus drafted tokens during a round).
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
	if stop, err := push(sample.Argmax(logits)); stop || err != nil {
		return res, err
	}
	drafts := make([]int, 0, k+1)
	one := make([]int, 1)
	for {
		roundStart := time.Now()
		tpos := len(seq) - 1 // target cached positions
		// Cut K so the verify pass fits the target cache and every token
		// it could yield is within the token limit, and the draft's pass
		// fits its cache.
		kr := max(0, min(k, p.MaxTokens-len(res.TokenIDs)-1, tcap-tpos-1, dcap-len(seq)+1))
		// Draft: catch up with the sequence, then propose kr tokens.
		drafts = append(drafts[:0], seq[tpos])
		if kr > 0 {
			t0 := time.Now()
			for pos := ds.Pos(); pos < len(seq) && err == nil; pos += batch {
				logits, err = ds.Forward(ctx, seq[pos:min(pos+batch, len(seq))], false)
			}
			for i := 0; err == nil; i++ {
				d := sample.Argmax(logits)
				drafts = append(drafts, d)
				if i == kr-1 {
					break
				}
				one[0] = d
				logits, err = ds.Forward(ctx, one, false)
			}
			st.DraftTime += time.Since(t0)
			if err != nil {
				res.Decode += time.Since(roundStart)
				return res, fmt.Errorf("spec: draft: %w", err)
			}
		}
		// Verify all positions in one target pass.
		ts.Step = step
		t0 := time.Now()
		logits, err = ts.Forward(ctx, drafts, kr > 0)
		d := time.Since(t0)
		st.TargetTime += d
		if err != nil {
			res.Decode += time.Since(roundStart)
			return res, fmt.Errorf("spec: verify: %w", err)
		}
		st.Rounds++
		st.Drafted += kr
		V := target.Vocab
		acc := 0
		for acc < kr && sample.Argmax(logits[acc*V:(acc+1)*V]) == drafts[acc+1] {
			acc++
		}
		st.Accepted += acc
		st.Histogram[acc]++
		ph := trace.Verify
		if kr == 0 {
			ph = trace.Decode
		}
		emit(step, ph, tpos, kr+1, d)
		step++
		next := sample.Argmax(logits[acc*V : (acc+1)*V])
		// Rewind both caches to the agreed sequence: the target keeps
		// seq[tpos] and the accepted drafts; the draft never cached the
		// last draft token, and drops the rejected ones.
		ts.Truncate(tpos + 1 + acc)
		ds.Truncate(tpos + 1 + acc)
		stop := false
		for _, id := range append(drafts[1:1+acc], next) {
			st.Generated++
			if stop, err = push(id); stop || err != nil {
				break
			}
		}
		res.Decode += time.Since(roundStart)
		res.DecodeSteps = len(res.TokenIDs) - 1
		if stop || err != nil {
			return res, err
		}
	}
}
