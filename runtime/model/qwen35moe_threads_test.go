package model

import (
	"context"
	"math"
	"testing"

	"github.com/lesfarm/lesfarm/runtime/tensor"
)

// TestQwen35ThreadsBitIdentical: with 2 and 3 threads (experts split by
// whole expert between the threads with the shared expert among them, the
// conv and gates split by channel and position, and the per-row steps of
// rowpar.go split by token), a prefill and the decode steps after it give
// the 1-thread logits bit for bit, on quantized weights (the F32 model of
// TestQwen35BatchMatchesStep takes the serial expert path). parMin 1 puts
// every per-row and per-channel step on the pool, decode's included, which
// the tiny models are otherwise too small for; the qwen3moe case covers
// the norms, router and combine it shares with qwen35moe.
func TestQwen35ThreadsBitIdentical(t *testing.T) {
	qwen35 := tinyQwen35File(t, defaultTinyQwen35(tensor.Q4_K))
	qwen3 := writeSynth(t, SynthConfig{Layers: 3, Experts: 16, ExpertsUsed: 4, Hidden: 256, ExpertFFN: 128,
		Heads: 4, KVHeads: 2, Vocab: 512, Type: tensor.Q4_K, Seed: 5})
	cases := []struct {
		name    string
		path    string
		threads int
		parMin  int // 0: the default
	}{
		{"qwen35moe/2", qwen35, 2, 0},
		{"qwen35moe/3", qwen35, 3, 0},
		{"qwen35moe/2/parMin1", qwen35, 2, 1},
		{"qwen35moe/3/parMin1", qwen35, 3, 1},
		{"qwen3moe/2/parMin1", qwen3, 2, 1},
	}
	want := map[string][][]float32{}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ref, ok := want[tc.path]
			if !ok {
				ref = threadsRun(t, tc.path, 1, 0)
				want[tc.path] = ref
			}
			got := threadsRun(t, tc.path, tc.threads, tc.parMin)
			for pass := range ref {
				for i := range ref[pass] {
					if math.Float32bits(got[pass][i]) != math.Float32bits(ref[pass][i]) {
						t.Fatalf("pass %d, logit %d: %v != 1 thread's %v", pass, i, got[pass][i], ref[pass][i])
					}
				}
			}
		})
	}
}

// threadsRun loads path on threads threads (with parMin, if not 0) and
// returns the logits of a 37-token prefill (every position) and of 5
// decode steps after it.
func threadsRun(t *testing.T, path string, threads, parMin int) [][]float32 {
	t.Helper()
	ctx := context.Background()
	m, err := Load(path, Options{Threads: threads})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	if parMin > 0 {
		m.parMin = parMin
	}
	prompt := make([]int, 37)
	for i := range prompt {
		prompt[i] = (i*71 + 5) % m.Vocab
	}
	st, err := m.NewState(64)
	if err != nil {
		t.Fatal(err)
	}
	var out [][]float32
	lg, err := st.Forward(ctx, prompt, true)
	if err != nil {
		t.Fatal(err)
	}
	out = append(out, append([]float32(nil), lg...))
	for i := range 5 {
		lg, err := st.Forward(ctx, []int{(i*131 + 9) % m.Vocab}, false)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, append([]float32(nil), lg...))
	}
	return out
}
