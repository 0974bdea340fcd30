package spec

import (
	"context"
	"errors"
	"fmt"

	"github.com/lesfarm/lesfarm/runtime/model"
	"github.com/lesfarm/lesfarm/runtime/sample"
)

// MTP drafting: a qwen35moe target drafts with its own MTP/NextN block
// (model.MTP), no separate draft file. The block at position p takes token
// x_p and the target's final-norm hidden state at p−1 and predicts
// x_{p+1}. After every target pass (prompt batches and verify passes) the
// block catches up on the newly agreed positions, whose hidden states that
// pass computed; the last catch-up's logits give the round's first draft.
// Further drafts chain the block on its own output hidden state
// (rms(y, shared_head_norm)) in place of the target's; the chained
// positions are dropped from the block's cache after the round, so it only
// ever caches positions computed from target hidden states. Verification
// and stopping are Run's, so greedy tokens equal plain greedy decoding.

// targetObserver is implemented by drafters that read the target's state:
// after every target pass, observe is called with the whole agreed
// sequence so far (seq, of which the target caches seq[:cached]).
type targetObserver interface {
	observe(ctx context.Context, ts *model.State, seq []int, cached int) error
}

// mtpDrafter is the Drafter of a target's own MTP block. It catches up
// lazily: observe only keeps the agreed positions' tokens and target
// hidden states (pending), and the block forwards them in one batch when a
// draft is asked for, so rounds that do not draft (adaptive k turned off)
// cost a copy of a hidden row per token, not a block pass and its output
// head. After a long stretch without drafting it restarts from the last
// maxBacklog positions (attention in the block is rotary, so a shifted
// start only drops the older context).
type mtpDrafter struct {
	target *model.Model
	d      *model.MTP
	cap    int
	off    int       // sequence position of the block's cache position 0
	pend   []float32 // hidden rows of the pending positions (target hidden at p−1)
	ptok   []int     // their tokens
	chn    []float32 // chained hidden state
	carry  []float32 // target hidden at the last position of the previous pass
	first  []float32 // logits of the first draft (the last catch-up)
	have   bool      // first holds the logits after seq[:off+d.Pos()]
	out    []int
	one    []int
	// override, in tests only, replaces the block's draft for sequence
	// position pos (to exercise partial acceptance with random weights,
	// whose MTP block never predicts the target).
	override func(pos, tok int) int
}

// next is the sequence position after the cached and pending ones.
func (md *mtpDrafter) next() int { return md.off + md.d.Pos() + len(md.ptok) }

// NewMTP returns a Decoder that drafts with target's own MTP block, or an
// error when the model has none.
func NewMTP(target *model.Model) (*Decoder, error) {
	if target == nil {
		return nil, errors.New("spec: a target model is required")
	}
	if !target.HasMTP() {
		return nil, fmt.Errorf("spec: %s has no MTP/NextN block to draft with (nextn_predict_layers = 0); give a draft model instead", target.Arch)
	}
	md := &mtpDrafter{target: target, one: make([]int, 1)}
	dec, err := NewWithDrafter(target, md)
	if err != nil {
		return nil, err
	}
	dec.mtp = md
	return dec, nil
}

// RunMTP is Run with target's own MTP block as the drafter.
func RunMTP(ctx context.Context, target *model.Model, p Params) (*Result, error) {
	d, err := NewMTP(target)
	if err != nil {
		return nil, err
	}
	return d.Run(ctx, p)
}

// Name implements Drafter.
func (md *mtpDrafter) Name() string { return "mtp" }

// Deterministic implements Drafter: the block samples like a draft model.
func (md *mtpDrafter) Deterministic() bool { return false }

// Start implements Drafter.
func (md *mtpDrafter) Start(capacity int) error {
	capacity = min(capacity, md.target.Context)
	if md.d == nil || md.cap < capacity {
		d, err := md.target.NewMTP(capacity)
		if err != nil {
			return fmt.Errorf("spec: MTP: %w", err)
		}
		md.d, md.cap = d, capacity
		H := md.target.Hidden
		md.chn, md.carry = make([]float32, H), make([]float32, H)
	}
	md.d.Reset()
	clear(md.carry)
	md.off, md.pend, md.ptok, md.have = 0, md.pend[:0], md.ptok[:0], false
	return nil
}

// observe implements targetObserver: keep positions next()..cached of seq
// pending (token seq[p] with the target's hidden state at p−1, from the
// pass just made, or carry for the position before it).
func (md *mtpDrafter) observe(_ context.Context, ts *model.State, seq []int, cached int) error {
	from, to := md.next(), min(cached+1, len(seq))
	if from >= to {
		return nil
	}
	H := md.target.Hidden
	for p := from; p < to; p++ {
		n := len(md.pend)
		md.pend = append(md.pend, make([]float32, H)...)
		row := md.pend[n : n+H]
		switch h := ts.OutputHidden(p - 1); {
		case p == 0:
			clear(row)
		case h != nil:
			copy(row, h)
		case p == from:
			copy(row, md.carry)
		default:
			return fmt.Errorf("spec: MTP: the target's hidden state at position %d is gone", p-1)
		}
		md.ptok = append(md.ptok, seq[p])
	}
	if h := ts.OutputHidden(cached - 1); h != nil {
		copy(md.carry, h)
	}
	md.have = false
	return nil
}

// catchUp forwards the pending positions through the block (the last
// maxBacklog of them from a fresh cache when more are pending, or when the
// cache would not hold them); first then holds the next draft's logits.
func (md *mtpDrafter) catchUp(ctx context.Context) error {
	if len(md.ptok) == 0 {
		return nil
	}
	H := md.target.Hidden
	if n := len(md.ptok); n > maxBacklog || md.d.Pos()+n > md.cap {
		drop := n - min(n, maxBacklog)
		md.off += md.d.Pos() + drop
		md.d.Reset()
		md.ptok, md.pend = md.ptok[drop:], md.pend[drop*H:]
	}
	logits, err := md.d.Forward(ctx, md.ptok, md.pend, false)
	md.ptok, md.pend = md.ptok[:0], md.pend[:0]
	if err != nil {
		return fmt.Errorf("spec: MTP draft: %w", err)
	}
	md.first = append(md.first[:0], logits...)
	md.have = true
	return nil
}

// Propose implements Drafter: the first draft from the catch-up, then
// chained block passes; the chained positions are dropped afterwards.
func (md *mtpDrafter) Propose(ctx context.Context, seq []int, k int, smp *sample.Sampler, q [][]float64) ([]int, error) {
	md.out = md.out[:0]
	tpos := len(seq) - 1
	if md.next() != len(seq) || k <= 0 {
		return md.out, nil
	}
	if err := md.catchUp(ctx); err != nil {
		return md.out, err
	}
	if !md.have {
		return md.out, nil
	}
	k = min(k, md.cap-md.d.Pos()+1)
	logits := md.first
	var err error
	for i := 0; i < k; i++ {
		var tok int
		if smp == nil {
			tok = sample.Argmax(logits)
		} else {
			smp.Dist(logits, q[i])
			tok = smp.Draw(q[i])
		}
		if md.override != nil {
			tok = md.override(tpos+1+i, tok)
		}
		md.out = append(md.out, tok)
		if i == k-1 {
			break
		}
		copy(md.chn, md.d.LastHidden())
		md.one[0] = tok
		if logits, err = md.d.Forward(ctx, md.one, md.chn, false); err != nil {
			md.d.Truncate(len(seq) - md.off)
			return md.out, fmt.Errorf("spec: MTP draft: %w", err)
		}
	}
	md.d.Truncate(len(seq) - md.off) // drop the chained positions
	return md.out, nil
}

// Rewind implements Drafter: positions ≥ n go, cached or pending.
func (md *mtpDrafter) Rewind(n int) {
	cached := md.off + md.d.Pos()
	switch {
	case n >= md.next():
		return
	case n >= cached:
		H := md.target.Hidden
		md.ptok, md.pend = md.ptok[:n-cached], md.pend[:(n-cached)*H]
	case n >= md.off:
		md.d.Truncate(n - md.off)
		md.ptok, md.pend = md.ptok[:0], md.pend[:0]
	default:
		md.d.Reset()
		md.off, md.ptok, md.pend = n, md.ptok[:0], md.pend[:0]
	}
	md.have = false
}
