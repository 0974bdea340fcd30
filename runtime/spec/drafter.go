package spec

import (
	"context"
	"errors"
	"fmt"

	"github.com/lesfarm/lesfarm/runtime/model"
	"github.com/lesfarm/lesfarm/runtime/sample"
)

// Drafter proposes the draft tokens of a speculative round. Drafters are
// not safe for concurrent use; a Decoder owns one.
type Drafter interface {
	// Name identifies the drafter in statistics: "model", "ngram".
	Name() string
	// Start begins a sequence of at most capacity positions.
	Start(capacity int) error
	// Propose returns up to k tokens continuing seq (the whole sequence:
	// prompt and generated tokens). With a nil sampler the proposal is
	// greedy. Otherwise each token is drawn from the drafter's
	// distribution under the sampler's parameters, and q[i] (len Vocab,
	// given by the caller) receives the distribution token i was drawn
	// from, unless the drafter is Deterministic. The returned slice is
	// reused by the next call.
	Propose(ctx context.Context, seq []int, k int, smp *sample.Sampler, q [][]float64) ([]int, error)
	// Deterministic reports proposals that do not depend on the sampler:
	// their draft distribution is one-hot at the proposed token.
	Deterministic() bool
	// Rewind tells the drafter that only seq[:n] is valid from now on.
	Rewind(n int)
}

// ModelDrafter drafts with a small model of the target's vocabulary (a
// dense qwen3 draft of a qwen3moe target): it caches the sequence and runs
// one forward pass per proposed token.
type ModelDrafter struct {
	m     *model.Model
	st    *model.State
	out   []int
	one   []int
	batch int
	// off is the sequence position of the state's first cached token:
	// after a long stretch without drafting (adaptive k turned off), the
	// drafter restarts from the last maxBacklog tokens instead of
	// forwarding the whole stretch, so a probe costs a bounded catch-up.
	off    int
	caught bool // the sequence's prompt has been caught up once
}

// maxBacklog bounds the tokens a ModelDrafter forwards to catch up after
// it has caught up with the prompt once.
const maxBacklog = 16

// NewModelDrafter returns a drafter for target running draft, or an error
// wrapping ErrVocabMismatch when their vocabularies differ.
func NewModelDrafter(target, draft *model.Model) (*ModelDrafter, error) {
	if target == nil || draft == nil {
		return nil, errors.New("spec: a target and a draft model are required")
	}
	if err := CheckVocab(target, draft); err != nil {
		return nil, err
	}
	return &ModelDrafter{m: draft, one: make([]int, 1), batch: 64}, nil
}

// Name implements Drafter.
func (d *ModelDrafter) Name() string { return "model" }

// Start implements Drafter; the state is reused when large enough.
func (d *ModelDrafter) Start(capacity int) error {
	capacity = min(capacity, d.m.Context)
	if d.st == nil || d.st.Cap() < capacity {
		st, err := d.m.NewState(capacity)
		if err != nil {
			return fmt.Errorf("spec: draft: %w", err)
		}
		d.st = st
	}
	d.st.Reset()
	d.off, d.caught = 0, false
	return nil
}

// Cap is the draft cache capacity (positions).
func (d *ModelDrafter) Cap() int { return d.st.Cap() }

// Propose implements Drafter: catch up with seq, then k passes of one
// token each (the last proposed token is not cached).
func (d *ModelDrafter) Propose(ctx context.Context, seq []int, k int, smp *sample.Sampler, q [][]float64) ([]int, error) {
	d.out = d.out[:0]
	if d.caught && len(seq)-d.off-d.st.Pos() > maxBacklog {
		d.st.Reset()
		d.off = len(seq) - maxBacklog
	}
	k = min(k, d.st.Cap()-(len(seq)-d.off)+1)
	if k <= 0 {
		return d.out, nil
	}
	d.caught = true
	var logits []float32
	var err error
	for pos := d.off + d.st.Pos(); pos < len(seq); pos += d.batch {
		if logits, err = d.st.Forward(ctx, seq[pos:min(pos+d.batch, len(seq))], false); err != nil {
			return d.out, fmt.Errorf("spec: draft: %w", err)
		}
	}
	if logits == nil {
		// Everything cached already (cannot happen after Rewind(len(seq)-1+…)):
		// recompute the last position.
		d.st.Truncate(len(seq) - 1 - d.off)
		if logits, err = d.st.Forward(ctx, seq[len(seq)-1:], false); err != nil {
			return d.out, fmt.Errorf("spec: draft: %w", err)
		}
	}
	for i := 0; ; i++ {
		var t int
		if smp == nil {
			t = sample.Argmax(logits)
		} else {
			smp.Dist(logits, q[i])
			t = smp.Draw(q[i])
		}
		d.out = append(d.out, t)
		if i == k-1 {
			return d.out, nil
		}
		d.one[0] = t
		if logits, err = d.st.Forward(ctx, d.one, false); err != nil {
			return d.out, fmt.Errorf("spec: draft: %w", err)
		}
	}
}

// Rewind implements Drafter.
func (d *ModelDrafter) Rewind(n int) { d.st.Truncate(max(0, n-d.off)) }

// Deterministic implements Drafter: the draft model samples.
func (d *ModelDrafter) Deterministic() bool { return false }

// NGramDrafter is the model-free prompt-lookup drafter: it finds the most
// recent earlier occurrence of the sequence's last n tokens (n from MaxN
// down to MinN) and proposes the tokens that followed it. It costs no
// forward pass, so it pays whenever the text repeats itself (quotations,
// code, lists, and the loops greedy decoding of small models falls into).
type NGramDrafter struct {
	MaxN, MinN int // match lengths tried, longest first (defaults 4 and 2)
	out        []int
}

// Name implements Drafter.
func (d *NGramDrafter) Name() string { return "ngram" }

// Start implements Drafter.
func (d *NGramDrafter) Start(int) error { return nil }

// Rewind implements Drafter (the drafter keeps no state).
func (d *NGramDrafter) Rewind(int) {}

// Deterministic implements Drafter.
func (d *NGramDrafter) Deterministic() bool { return true }

func (d *NGramDrafter) modelFree() {}

// isModelFree reports a drafter that runs no model (its proposal is a
// scan of the sequence).
func isModelFree(d Drafter) bool {
	_, ok := d.(interface{ modelFree() })
	return ok
}

// Propose implements Drafter. Proposals are deterministic.
func (d *NGramDrafter) Propose(_ context.Context, seq []int, k int, _ *sample.Sampler, _ [][]float64) ([]int, error) {
	d.out = d.out[:0]
	maxN, minN := d.MaxN, d.MinN
	if maxN <= 0 {
		maxN = 4
	}
	if minN <= 0 {
		minN = 2
	}
	L := len(seq)
	for n := min(maxN, L-1); n >= minN && k > 0; n-- {
		pat := seq[L-n:]
		// Latest start i < L-n with seq[i:i+n] == pat.
		for i := L - n - 1; i >= 0; i-- {
			if seq[i] != pat[0] || !equal(seq[i:i+n], pat) {
				continue
			}
			end := min(i+n+k, L)
			d.out = append(d.out, seq[i+n:end]...)
			return d.out, nil
		}
	}
	return d.out, nil
}

func equal(a, b []int) bool {
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
