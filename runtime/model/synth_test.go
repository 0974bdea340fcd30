package model

import (
	"bytes"
	"context"
	"crypto/sha256"
	"math"
	"os"
	"path/filepath"
	"testing"

	"github.com/lesfarm/lesfarm/runtime/tensor"
)

func writeSynth(t *testing.T, c SynthConfig) string {
	t.Helper()
	var buf bytes.Buffer
	if err := WriteSynthetic(&buf, c); err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(t.TempDir(), "synth.gguf")
	if err := os.WriteFile(p, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestSynthRunsAndRoutes writes small synthetic models of every type,
// loads them and checks that activations stay finite, logits are not flat,
// and routing spreads over many experts (not degenerate).
func TestSynthRunsAndRoutes(t *testing.T) {
	for _, typ := range SynthTypes {
		t.Run(typ.String(), func(t *testing.T) {
			c := SynthConfig{Layers: 4, Experts: 16, ExpertsUsed: 4, Hidden: 256, ExpertFFN: 256, Heads: 4, KVHeads: 2, Vocab: 1000, Type: typ, Seed: 3}
			m, err := Load(writeSynth(t, c), Options{})
			if err != nil {
				t.Fatal(err)
			}
			defer m.Close()
			if m.Layers[1].Shape.GateType != typ {
				t.Fatalf("expert type %s, want %s", m.Layers[1].Shape.GateType, typ)
			}
			st, _ := m.NewState(64)
			used := map[[2]int]bool{}
			st.OnRoute = func(pos, layer int, experts []int, _ []float32) {
				for _, e := range experts {
					used[[2]int{layer, e}] = true
				}
			}
			toks := make([]int, 48)
			for i := range toks {
				toks[i] = (i*37 + 11) % 1000
			}
			logits, err := st.Forward(context.Background(), toks, false)
			if err != nil {
				t.Fatal(err)
			}
			var mean, sq float64
			for _, v := range logits {
				if math.IsNaN(float64(v)) || math.IsInf(float64(v), 0) {
					t.Fatalf("non-finite logit %v", v)
				}
				mean += float64(v)
				sq += float64(v) * float64(v)
			}
			n := float64(len(logits))
			std := math.Sqrt(sq/n - (mean/n)*(mean/n))
			if std < 0.3 || std > 20 {
				t.Fatalf("logit std %.3g: activations degenerate", std)
			}
			if len(used) < 4*12 {
				t.Fatalf("only %d of 64 (layer, expert) pairs used by 48 tokens: routing degenerate", len(used))
			}
			t.Logf("%s: logit std %.2f, %d/64 experts used", typ, std, len(used))
		})
	}
}

func TestSynthDeterministicAndDense(t *testing.T) {
	c := SynthConfig{Arch: "qwen3", Layers: 2, Hidden: 128, ExpertFFN: 256, Heads: 4, KVHeads: 2, Vocab: 512, Type: tensor.Q8_0, Seed: 9}
	var a, b bytes.Buffer
	if err := WriteSynthetic(&a, c); err != nil {
		t.Fatal(err)
	}
	if err := WriteSynthetic(&b, c); err != nil {
		t.Fatal(err)
	}
	if sha256.Sum256(a.Bytes()) != sha256.Sum256(b.Bytes()) {
		t.Fatal("same config and seed wrote different files")
	}
	size, err := SynthSize(c)
	if err != nil || size <= 0 || size > int64(a.Len()) {
		t.Fatalf("SynthSize = %d, %v (file %d bytes)", size, err, a.Len())
	}
	m, err := Load(writeSynth(t, c), Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	if m.IsMoE() || m.Layers[0].Gate == nil {
		t.Fatal("dense qwen3 synth loaded without a dense FFN")
	}
	st, _ := m.NewState(8)
	if _, err := st.Forward(context.Background(), []int{1, 2, 3}, false); err != nil {
		t.Fatal(err)
	}
}

func TestSynthRejectsBadGeometry(t *testing.T) {
	for _, c := range []SynthConfig{
		{Arch: "llama", Layers: 1, Hidden: 64, Heads: 2, ExpertFFN: 64, Experts: 2, ExpertsUsed: 1, Vocab: 300},
		{Layers: 1, Hidden: 64, Heads: 2, ExpertFFN: 64, Experts: 2, ExpertsUsed: 3, Vocab: 300},
		{Layers: 1, Hidden: 60, Heads: 2, ExpertFFN: 64, Experts: 2, ExpertsUsed: 1, Vocab: 300},
		{Layers: 1, Hidden: 64, Heads: 3, KVHeads: 2, ExpertFFN: 64, Experts: 2, ExpertsUsed: 1, Vocab: 300},
		{Layers: 1, Hidden: 64, Heads: 2, ExpertFFN: 64, Experts: 2, ExpertsUsed: 1, Vocab: 10},
		{Layers: 1, Hidden: 64, Heads: 2, ExpertFFN: 64, Experts: 2, ExpertsUsed: 1, Vocab: 300, Type: tensor.Q6_K},
	} {
		if err := WriteSynthetic(&bytes.Buffer{}, c); err == nil {
			t.Errorf("WriteSynthetic(%+v) accepted a bad config", c)
		}
	}
}
