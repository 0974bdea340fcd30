package bench

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/lesfarm/lesfarm/runtime/model"
	"github.com/lesfarm/lesfarm/runtime/tensor"
)

// TestRunQwen35StateBytes: the report of a qwen35moe model carries the
// sequence state (KV + recurrent) and counts its DeltaNet and shared
// expert matrices in the bytes read per token.
func TestRunQwen35StateBytes(t *testing.T) {
	c := model.SynthConfig{Arch: "qwen35moe", Layers: 4, Experts: 8, ExpertsUsed: 2, Hidden: 64, ExpertFFN: 64,
		Heads: 2, KVHeads: 1, HeadDim: 32, Vocab: 300, Context: 64, Type: tensor.F32, Seed: 3}
	p := writeSynth(t, c)
	rep, err := Run(context.Background(), Config{Model: p, Threads: []int{1}, Repetitions: 1, Warmup: 0, PromptTokens: 8, GenTokens: 8})
	if err != nil {
		t.Fatal(err)
	}
	m, err := model.Load(p, model.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	st, err := m.NewState(8)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range rep.Rows {
		if r.StateBytes != st.StateBytes() || r.RecurrentStateBytes != st.RecurrentStateBytes() || r.RecurrentStateBytes == 0 {
			t.Fatalf("%s: state %d / recurrent %d, want %d / %d", r.Test, r.StateBytes, r.RecurrentStateBytes, st.StateBytes(), st.RecurrentStateBytes())
		}
	}
	if m.HybridMatrixBytes() == 0 || residentMatrixBytes(m, 1) <= m.HybridMatrixBytes() {
		t.Fatalf("DeltaNet/shared-expert bytes %d not counted (resident matrices %d)", m.HybridMatrixBytes(), residentMatrixBytes(m, 1))
	}
	var b bytes.Buffer
	if err := rep.Write(&b, "md"); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(b.String(), "sequence state: ") {
		t.Fatalf("markdown report lacks the sequence state:\n%s", b.String())
	}
	t.Log(b.String())
}
