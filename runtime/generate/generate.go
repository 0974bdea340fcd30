// Package generate runs the generation loop of the LES runtime: batched
// prefill of the prompt, then token-by-token decoding with a sampler until
// an end-of-generation token, the token limit or the context length. It
// measures prefill and decode throughput and time to first token, and emits
// a trace.TokenEvent per step.
package generate

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/lesfarm/lesfarm/runtime/model"
	"github.com/lesfarm/lesfarm/runtime/sample"
	"github.com/lesfarm/lesfarm/runtime/trace"
)

// DefaultBatch is the prefill batch size (positions per forward pass).
const DefaultBatch = 512

// TokenReporter is implemented by expert sources that know per-step
// statistics (bytes read, stall, cache occupancy). The loop calls it right
// before emitting each TokenEvent.
type TokenReporter interface {
	FillTokenEvent(ev *trace.TokenEvent)
}

// Params configures Run.
type Params struct {
	// PromptIDs is the tokenized prompt (at least one token).
	PromptIDs []int
	// MaxTokens is the number of tokens to generate at most (> 0).
	MaxTokens int
	// Sampling configures the sampler; the zero value is greedy.
	Sampling sample.Params
	// IsEOG reports end-of-generation tokens; nil never stops early.
	IsEOG func(id int) bool
	// Sink receives token and layer events; nil discards.
	Sink trace.Sink
	// Batch is the prefill batch size (default DefaultBatch).
	Batch int
	// OnToken, if set, is called with each generated token as soon as it is
	// sampled (streaming output). An error stops generation.
	OnToken func(id int) error
	// State, if set, is used (and reset) instead of a fresh cache; its
	// capacity must hold the prompt and the generated tokens.
	State *model.State
}

// Stop reasons.
const (
	StopEOG       = "eog"
	StopMaxTokens = "max_tokens"
	StopContext   = "context"
)

// Result is the outcome of one generation.
type Result struct {
	PromptIDs  []int
	TokenIDs   []int  // generated tokens, including a final EOG token
	StopReason string // StopEOG, StopMaxTokens or StopContext
	// Prefill is the wall time of the prompt's forward passes; Decode of
	// the decode forward passes; TTFT from the start until the first
	// generated token was sampled.
	Prefill, Decode, TTFT time.Duration
	// DecodeSteps is the number of single-token forward passes (generated
	// tokens minus one).
	DecodeSteps int
}

// ErrPromptTooLong is returned (wrapped) when the prompt does not fit the
// model's context.
var ErrPromptTooLong = errors.New("prompt too long")

// Run generates from m. It returns ctx's error when cancelled, together
// with the partial result.
func Run(ctx context.Context, m *model.Model, p Params) (*Result, error) {
	n := len(p.PromptIDs)
	switch {
	case n == 0:
		return nil, fmt.Errorf("generate: empty prompt: give at least one token")
	case n > m.Context:
		return nil, fmt.Errorf("generate: %w: %d tokens exceed the context length %d of the model; shorten the prompt", ErrPromptTooLong, n, m.Context)
	case p.MaxTokens <= 0:
		return nil, fmt.Errorf("generate: max tokens %d must be > 0", p.MaxTokens)
	}
	smp, err := sample.New(p.Sampling)
	if err != nil {
		return nil, fmt.Errorf("generate: %w", err)
	}
	batch := p.Batch
	if batch <= 0 {
		batch = DefaultBatch
	}
	want := min(n+p.MaxTokens, m.Context)
	st := p.State
	if st == nil || st.Cap() < want {
		if st, err = m.NewState(want); err != nil {
			return nil, fmt.Errorf("generate: %w", err)
		}
	}
	st.Reset()
	st.Sink = p.Sink
	defer func() { st.Sink = nil }()
	rep, _ := m.Experts.(TokenReporter)
	res := &Result{PromptIDs: p.PromptIDs, TokenIDs: make([]int, 0, p.MaxTokens)}
	var ev trace.TokenEvent
	emit := func(step int, ph trace.Phase, pos, tokens int, d time.Duration) {
		if p.Sink == nil {
			return
		}
		ev = trace.TokenEvent{Step: step, Phase: ph, Pos: pos, Tokens: tokens, Duration: d}
		if rep != nil {
			rep.FillTokenEvent(&ev)
		}
		p.Sink.Token(&ev)
	}

	start := time.Now()
	var logits []float32
	one := make([]int, 1)
	step := 0
	for pos := 0; pos < n; pos += batch {
		end := min(pos+batch, n)
		st.Step = step
		t0 := time.Now()
		logits, err = st.Forward(ctx, p.PromptIDs[pos:end], false)
		if err != nil {
			return res, fmt.Errorf("generate: prefill: %w", err)
		}
		d := time.Since(t0)
		res.Prefill += d
		emit(step, trace.Prefill, pos, end-pos, d)
		step++
	}
	for {
		id := smp.Sample(logits)
		if len(res.TokenIDs) == 0 {
			res.TTFT = time.Since(start)
		}
		res.TokenIDs = append(res.TokenIDs, id)
		if p.OnToken != nil {
			if err := p.OnToken(id); err != nil {
				return res, err
			}
		}
		switch {
		case p.IsEOG != nil && p.IsEOG(id):
			res.StopReason = StopEOG
		case len(res.TokenIDs) >= p.MaxTokens:
			res.StopReason = StopMaxTokens
		case st.Pos() >= st.Cap():
			res.StopReason = StopContext
		}
		if res.StopReason != "" {
			return res, nil
		}
		st.Step = step
		t0 := time.Now()
		pos := st.Pos()
		one[0] = id
		logits, err = st.Forward(ctx, one, false)
		if err != nil {
			return res, fmt.Errorf("generate: decode: %w", err)
		}
		d := time.Since(t0)
		res.Decode += d
		res.DecodeSteps++
		emit(step, trace.Decode, pos, 1, d)
		step++
	}
}
