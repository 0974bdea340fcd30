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

// MTP drafting: a qwen35moe target drafts with its own MTP/NextN block
// (model.MTP), no separate draft file. The block at position p takes token
// x_p and the target's final-norm hidden state at p−1 and predicts
// x_{p+1}. Each round it first catches up on the target's accepted
// positions (their hidden states come from the last verify pass), which
// gives the first draft; further drafts chain the block on its own output
// hidden state (rms(y, shared_head_norm)) in place of the target's. The
// chained positions are dropped from the block's cache after the round, so
// it only ever caches positions computed from target hidden states.
// Verification and stopping are Run's, so the tokens equal plain greedy
// decoding.

// mtpDrafter is a Decoder's MTP state.
type mtpDrafter struct {
	d   *model.MTP
	cap int
	hid []float32 // catch-up hidden rows
	chn []float32 // chained hidden state
	// override, in tests only, replaces the block's draft for sequence
	// position pos (to exercise partial acceptance with random weights,
	// whose MTP block never predicts the target).
	override func(pos, tok int) int
}

// NewMTP returns a Decoder that drafts with target's own MTP block, or an
// error when the model has none.
func NewMTP(target *model.Model) (*Decoder, error) {
	if target == nil {
		return nil, errors.New("spec: a target model is required")
	}
	if !target.HasMTP() {
		return nil, fmt.Errorf("spec: %s has no MTP/NextN block to draft with (nextn_predict_layers = 0); give a draft model instead", target.Arch)
	}
	return &Decoder{target: target, draft: target, mtp: &mtpDrafter{}}, nil
}

// RunMTP is Run with target's own MTP block as the drafter.
func RunMTP(ctx context.Context, target *model.Model, p Params) (*Result, error) {
	d, err := NewMTP(target)
	if err != nil {
		return nil, err
	}
	return d.Run(ctx, p)
}

// catchUp runs the MTP block on positions from..to-1 of seq with the
// target's hidden states of positions from-1..to-2 (zeros for position
// −1), all of which must be in the target's last pass or be carry (the
// hidden state of from-1 when it precedes that pass).
func (md *mtpDrafter) catchUp(ctx context.Context, ts *model.State, seq []int, from, to int, carry []float32) ([]float32, error) {
	H := len(md.chn)
	md.hid = grow(md.hid, (to-from)*H)
	for p := from; p < to; p++ {
		row := md.hid[(p-from)*H : (p-from+1)*H]
		switch h := ts.OutputHidden(p - 1); {
		case p == 0:
			clear(row)
		case h != nil:
			copy(row, h)
		case p == from && carry != nil:
			copy(row, carry)
		default:
			return nil, fmt.Errorf("spec: MTP: the target's hidden state at position %d is gone", p-1)
		}
	}
	return md.d.Forward(ctx, seq[from:to], md.hid[:(to-from)*H], false)
}

func grow(b []float32, n int) []float32 {
	if cap(b) < n {
		return make([]float32, n)
	}
	return b[:n]
}

// runMTP is Run for a Decoder made by NewMTP.
func (dec *Decoder) runMTP(ctx context.Context, p Params, k, tcap int) (*Result, error) {
	target, md := dec.target, dec.mtp
	n := len(p.PromptIDs)
	batch := p.Batch
	if batch <= 0 {
		batch = generate.DefaultBatch
	}
	var err error
	if dec.ts == nil || dec.ts.Cap() < tcap {
		if dec.ts, err = target.NewState(tcap); err != nil {
			return nil, fmt.Errorf("spec: %w", err)
		}
	}
	dcap := min(tcap+k, target.Context)
	if md.d == nil || md.cap < dcap {
		if md.d, err = target.NewMTP(dcap); err != nil {
			return nil, fmt.Errorf("spec: MTP: %w", err)
		}
		md.cap = dcap
		md.chn = make([]float32, target.Hidden)
	}
	ts, d := dec.ts, md.d
	ts.Reset()
	d.Reset()
	ts.Sink = p.Sink
	defer func() { ts.Sink = nil }()
	rep, _ := target.Experts.(generate.TokenReporter)
	emit := func(step int, ph trace.Phase, pos, tokens int, dur time.Duration) {
		if p.Sink == nil {
			return
		}
		ev := trace.TokenEvent{Step: step, Phase: ph, Pos: pos, Tokens: tokens, Duration: dur}
		if rep != nil {
			rep.FillTokenEvent(&ev)
		}
		p.Sink.Token(&ev)
	}
	res := &Result{Result: generate.Result{PromptIDs: p.PromptIDs, TokenIDs: make([]int, 0, p.MaxTokens)}}
	res.Spec = Stats{K: k, Histogram: make([]int, k+1)}
	st := &res.Spec
	seq := make([]int, n, n+p.MaxTokens)
	copy(seq, p.PromptIDs)

	start := time.Now()
	var logits []float32
	carry := make([]float32, target.Hidden) // target hidden at the position before the last pass
	step := 0
	for pos := 0; pos < n; pos += batch {
		end := min(pos+batch, n)
		ts.Step = step
		t0 := time.Now()
		if logits, err = ts.Forward(ctx, p.PromptIDs[pos:end], false); err != nil {
			return res, fmt.Errorf("spec: prefill: %w", err)
		}
		dur := time.Since(t0)
		res.Prefill += dur
		emit(step, trace.Prefill, pos, end-pos, dur)
		step++
		// The MTP block sees the prompt as it goes (the target's hidden
		// states of this batch are gone after the next one).
		t0 = time.Now()
		if _, err := md.catchUp(ctx, ts, seq, pos, end, carry); err != nil {
			return res, err
		}
		copy(carry, ts.OutputHidden(end-1))
		st.DraftTime += time.Since(t0)
	}
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
		case len(seq)-1 >= tcap:
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
		tpos := len(seq) - 1
		kr := max(0, min(k, p.MaxTokens-len(res.TokenIDs)-1, tcap-tpos-1, dcap-len(seq)+1))
		drafts = append(drafts[:0], seq[tpos])
		if kr > 0 {
			t0 := time.Now()
			// Catch up on the accepted positions up to tpos (x_tpos with the
			// target's h at tpos−1): the first draft.
			logits, err = md.catchUp(ctx, ts, seq, d.Pos(), tpos+1, nil)
			for i := 0; err == nil; i++ {
				tok := sample.Argmax(logits)
				if md.override != nil {
					tok = md.override(tpos+1+i, tok)
				}
				drafts = append(drafts, tok)
				if i == kr-1 {
					break
				}
				copy(md.chn, d.LastHidden())
				one[0] = tok
				logits, err = d.Forward(ctx, one, md.chn, false)
			}
			d.Truncate(tpos + 1) // drop the chained positions
			st.DraftTime += time.Since(t0)
			if err != nil {
				res.Decode += time.Since(roundStart)
				return res, fmt.Errorf("spec: MTP draft: %w", err)
			}
		}
		ts.Step = step
		t0 := time.Now()
		logits, err = ts.Forward(ctx, drafts, kr > 0)
		dur := time.Since(t0)
		st.TargetTime += dur
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
		emit(step, ph, tpos, kr+1, dur)
		step++
		next := sample.Argmax(logits[acc*V : (acc+1)*V])
		ts.Truncate(tpos + 1 + acc)
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
