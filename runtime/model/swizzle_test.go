package model

import (
	"context"
	"math"
	"os"
	"path/filepath"
	"testing"

	"github.com/lesfarm/lesfarm/runtime/moe"
	"github.com/lesfarm/lesfarm/runtime/tensor"
)

// TestSwizzledLoadMatchesGGUFLayout loads Q4_K qwen3moe and qwen35moe
// models with the default layout (swizzled where this machine has one) and
// with Options.GGUFLayout, checks that the default swizzled matrices and
// resident experts, and that prefill logits of every position and the next
// decode step's are bit-identical between the two, at 1 and 2 threads.
func TestSwizzledLoadMatchesGGUFLayout(t *testing.T) {
	tests := []struct {
		name string
		c    SynthConfig
	}{
		{"qwen3moe", SynthConfig{Layers: 2, Experts: 8, ExpertsUsed: 2, Hidden: 256, ExpertFFN: 256, Heads: 2, KVHeads: 1, HeadDim: 128, Vocab: 512, Context: 64, Type: tensor.Q4_K, Seed: 3}},
		{"qwen35moe", fixtureQwen35(tensor.Q4_K)},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "m.gguf")
			f, err := os.Create(path)
			if err != nil {
				t.Fatal(err)
			}
			if err := WriteSynthetic(f, tc.c); err != nil {
				t.Fatal(err)
			}
			if err := f.Close(); err != nil {
				t.Fatal(err)
			}
			for _, threads := range []int{1, 2} {
				swz := forwardLogits(t, path, Options{Threads: threads}, tensor.Swizzles(tensor.Q4_K))
				ggl := forwardLogits(t, path, Options{Threads: threads, GGUFLayout: true}, false)
				for i := range swz {
					if math.Float32bits(swz[i]) != math.Float32bits(ggl[i]) {
						t.Fatalf("threads=%d logit %d: swizzled %v, GGUF layout %v", threads, i, swz[i], ggl[i])
					}
				}
			}
		})
	}
}

// forwardLogits loads path with opts, checks whether its Q4_K weights are
// swizzled (want), and returns the logits of a 6-token prefill (every
// position) followed by one decode step.
func forwardLogits(t *testing.T, path string, opts Options, want bool) []float32 {
	t.Helper()
	m, err := Load(path, opts)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	got := false
	for _, l := range m.Layers {
		for _, mt := range []tensor.Matrix{l.Q, l.O} {
			got = got || mt.Swizzled
		}
	}
	if res, ok := m.Experts.(*moe.Resident); ok && len(res.Data) > 0 && len(res.Data[len(res.Data)-1]) > 0 {
		got = got || res.Data[len(res.Data)-1][0].Swizzled
	}
	if got != want {
		t.Fatalf("swizzled weights: %t, want %t", got, want)
	}
	st, err := m.NewState(32)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	out, err := st.Forward(ctx, []int{1, 7, 42, 300, 5, 9}, true)
	if err != nil {
		t.Fatal(err)
	}
	logits := append([]float32(nil), out...)
	out, err = st.Forward(ctx, []int{11}, false)
	if err != nil {
		t.Fatal(err)
	}
	return append(logits, out...)
}
