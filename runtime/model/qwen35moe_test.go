package model

import (
	"context"
	"math"
	"os"
	"slices"
	"testing"

	"github.com/lesfarm/lesfarm/runtime/sample"
	"github.com/lesfarm/lesfarm/runtime/tensor"
	"github.com/lesfarm/lesfarm/runtime/trace"
)

// qwen35Models returns the qwen35moe models the state tests run on: the
// repo's own tiny F32 and Q4_K models (always) and the shared F32 fixture
// (when present).
func qwen35Models(t *testing.T) map[string]string {
	t.Helper()
	out := map[string]string{
		"tiny-f32":  tinyQwen35File(t, defaultTinyQwen35(tensor.F32)),
		"tiny-q4_k": tinyQwen35File(t, defaultTinyQwen35(tensor.Q4_K)),
	}
	if p := sharedTestdata(t) + "/qwen35moe/tiny-qwen35moe-f32.gguf"; fileExists(p) {
		out["shared-f32"] = p
	}
	return out
}

// decodeAll runs tokens through a fresh state one by one and returns the
// logits after the last one.
func decodeFresh(t *testing.T, m *Model, tokens []int) []float32 {
	t.Helper()
	st, err := m.NewState(128)
	if err != nil {
		t.Fatal(err)
	}
	logits, err := st.Forward(context.Background(), tokens, false)
	if err != nil {
		t.Fatal(err)
	}
	return slices.Clone(logits)
}

// TestQwen35TruncateMatchesFreshDecode is the rollback contract State.Truncate
// gives speculative decoding: after a verification batch of k tokens and a
// truncation to any of its prefixes, and after truncations far past the
// rollback window (recomputation), the next logits are bit-identical to a
// fresh decode of the same tokens.
func TestQwen35TruncateMatchesFreshDecode(t *testing.T) {
	ctx := context.Background()
	for name, path := range qwen35Models(t) {
		t.Run(name, func(t *testing.T) {
			m, err := Load(path, Options{Threads: 2})
			if err != nil {
				t.Fatal(err)
			}
			defer m.Close()
			seq := make([]int, 60)
			for i := range seq {
				seq[i] = (i*37 + 11) % m.Vocab
			}
			st, err := m.NewState(128)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := st.Forward(ctx, seq[:20], false); err != nil {
				t.Fatal(err)
			}
			pos := 20
			cases := []struct {
				name        string
				batch, keep int // forward batch tokens, then keep this many of them
			}{
				{"reject all of 5", 5, 0},
				{"accept 2 of 5", 5, 2},
				{"accept 4 of 5", 5, 4},
				{"decode 1, reject it", 1, 0},
				{"batch of 9, keep 8", 9, 8},
				{"batch longer than the window", RollbackWindow + 4, 3},
			}
			for _, c := range cases {
				if _, err := st.Forward(ctx, seq[pos:pos+c.batch], true); err != nil {
					t.Fatal(err)
				}
				st.Truncate(pos + c.keep)
				pos += c.keep
				// Continue with a token that differs from the rolled-back ones.
				next := (seq[pos] + 1) % m.Vocab
				got, err := st.Forward(ctx, []int{next}, false)
				if err != nil {
					t.Fatal(err)
				}
				want := decodeFresh(t, m, append(slices.Clone(seq[:pos]), next))
				if !slices.Equal(got, want) {
					d, _ := compareLogits(got, want)
					t.Fatalf("%s: logits after rollback differ from a fresh decode (max |Δ| %.3g)", c.name, d)
				}
				st.Truncate(pos) // drop next again
			}
			// Past the window: recomputed from the token history.
			for _, back := range []int{RollbackWindow + 5, pos - 1, pos} {
				st.Truncate(pos - back)
				pos -= back
				next := (seq[pos] + 3) % m.Vocab
				got, err := st.Forward(ctx, []int{next}, false)
				if err != nil {
					t.Fatal(err)
				}
				want := decodeFresh(t, m, append(slices.Clone(seq[:pos]), next))
				if !slices.Equal(got, want) {
					t.Fatalf("truncate back %d to %d: logits differ from a fresh decode", back, pos)
				}
				st.Truncate(pos)
				if _, err := st.Forward(ctx, seq[pos:pos+30], false); err != nil {
					t.Fatal(err)
				}
				pos += 30
			}
			if st.StateBytes() <= st.RecurrentStateBytes() || st.RecurrentStateBytes() == 0 {
				t.Fatalf("StateBytes %d, RecurrentStateBytes %d", st.StateBytes(), st.RecurrentStateBytes())
			}
			t.Logf("state: %d bytes (recurrent %d, window %d)", st.StateBytes(), st.RecurrentStateBytes(), RollbackWindow)
		})
	}
}

// TestQwen35BatchMatchesStep: batched prefill (sequential recurrence inside
// one pass) gives the same logits as token-by-token decoding.
func TestQwen35BatchMatchesStep(t *testing.T) {
	ctx := context.Background()
	m, err := Load(tinyQwen35File(t, defaultTinyQwen35(tensor.F32)), Options{Threads: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	toks := []int{5, 300, 17, 42, 99, 500, 3, 256, 1, 77}
	batch, err := m.NewState(64)
	if err != nil {
		t.Fatal(err)
	}
	all, err := batch.Forward(ctx, toks, true)
	if err != nil {
		t.Fatal(err)
	}
	all = slices.Clone(all)
	step, _ := m.NewState(64)
	worst := 0.0
	for i, tk := range toks {
		lg, err := step.Forward(ctx, []int{tk}, false)
		if err != nil {
			t.Fatal(err)
		}
		d, _ := compareLogits(lg, all[i*m.Vocab:(i+1)*m.Vocab])
		worst = max(worst, d)
	}
	if worst > 1e-5 {
		t.Fatalf("batched prefill differs from token-by-token decode by %.3g", worst)
	}
	// Threads split the DeltaNet heads between goroutines: bit-identical.
	one, err := Load(tinyQwen35File(t, defaultTinyQwen35(tensor.F32)), Options{Threads: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer one.Close()
	long := make([]int, 40)
	for i := range long {
		long[i] = (i*53 + 3) % m.Vocab
	}
	s1, _ := one.NewState(64)
	s2, _ := m.NewState(64)
	l1, err := s1.Forward(ctx, long, true)
	if err != nil {
		t.Fatal(err)
	}
	l2, err := s2.Forward(ctx, long, true)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(l1, l2) {
		t.Fatal("2 threads give different logits from 1 thread")
	}
	// The output is not degenerate: logits vary and are finite.
	var sum, sq float64
	for _, v := range all {
		if math.IsNaN(float64(v)) || math.IsInf(float64(v), 0) {
			t.Fatal("non-finite logit")
		}
		sum += float64(v)
		sq += float64(v) * float64(v)
	}
	n := float64(len(all))
	if std := math.Sqrt(sq/n - (sum/n)*(sum/n)); std < 0.1 {
		t.Fatalf("logit std %.3g: the tiny model is degenerate", std)
	}
	if a, b := sample.Argmax(all[:m.Vocab]), sample.Argmax(all[m.Vocab:2*m.Vocab]); a == b && a == sample.Argmax(all[2*m.Vocab:3*m.Vocab]) {
		t.Logf("note: argmax %d repeats", a)
	}
}

func fileExists(p string) bool { _, err := os.Stat(p); return err == nil }

// TestQwen35DecodeAllocs: a single-token qwen35moe decode step allocates
// nothing (scratch is reused, the DeltaNet head workers are not closures).
func TestQwen35DecodeAllocs(t *testing.T) {
	m, err := Load(tinyQwen35File(t, defaultTinyQwen35(tensor.Q4_K)), Options{Threads: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	st, err := m.NewState(256)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, err := st.Forward(ctx, []int{1, 2, 3}, false); err != nil {
		t.Fatal(err)
	}
	one := []int{5}
	if a := testing.AllocsPerRun(50, func() {
		if _, err := st.Forward(ctx, one, false); err != nil {
			t.Fatal(err)
		}
	}); a != 0 {
		t.Fatalf("%v allocations per decode step", a)
	}
}

// cancelAfter cancels its context after n layer events.
type cancelAfter struct {
	n      int
	cancel context.CancelFunc
}

func (c *cancelAfter) Token(*trace.TokenEvent) {}
func (c *cancelAfter) Read(*trace.ReadEvent)   {}
func (c *cancelAfter) Layer(*trace.LayerEvent) {
	if c.n--; c.n == 0 {
		c.cancel()
	}
}

// TestQwen35CancelledPassRecovers: a pass cancelled after some layers
// advanced their recurrent state leaves the sequence exact: the next
// Forward gives a fresh decode's logits.
func TestQwen35CancelledPassRecovers(t *testing.T) {
	m, err := Load(tinyQwen35File(t, defaultTinyQwen35(tensor.F32)), Options{Threads: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	st, err := m.NewState(64)
	if err != nil {
		t.Fatal(err)
	}
	prompt := []int{3, 1, 4, 1, 5, 9, 2, 6}
	if _, err := st.Forward(context.Background(), prompt, false); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	st.Sink = &cancelAfter{n: 2, cancel: cancel} // after DeltaNet layers 0 and 1
	if _, err := st.Forward(ctx, []int{100, 200}, false); err == nil {
		t.Fatal("cancelled pass succeeded")
	}
	st.Sink = nil
	if st.Pos() != len(prompt) {
		t.Fatalf("pos %d after a failed pass, want %d", st.Pos(), len(prompt))
	}
	got, err := st.Forward(context.Background(), []int{7}, false)
	if err != nil {
		t.Fatal(err)
	}
	if want := decodeFresh(t, m, append(slices.Clone(prompt), 7)); !slices.Equal(got, want) {
		t.Fatal("logits after a cancelled pass differ from a fresh decode")
	}
}
