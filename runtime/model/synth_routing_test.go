package model

import (
	"math"
	"os"
	"path/filepath"
	"sort"
	"testing"

	"github.com/lesfarm/lesfarm/runtime/tensor"
)

// TestQ4KBlock: the fast encoder of structured blocks keeps zero
// sub-blocks exactly zero, a constant sub-block within a step, and random
// values within half a step of their sub-block's scale.
func TestQ4KBlock(t *testing.T) {
	t.Parallel()
	g := newRNG(1, "q4k")
	tests := []struct {
		name string
		fill func(i int) float32
	}{
		{"embedding row", func(i int) float32 {
			switch {
			case i >= 32 && i < 64:
				return 0
			case i >= 64 && i < 96:
				return 5.66
			}
			return float32(g.normal())
		}},
		{"one-hot", func(i int) float32 { return map[bool]float32{true: -1.5}[i == 77] }},
		{"all zero", func(int) float32 { return 0 }},
	}
	for _, tt := range tests {
		v := make([]float32, 256)
		for i := range v {
			v[i] = tt.fill(i)
		}
		got := make([]float32, 256)
		if err := tensor.Dequantize(tensor.Q4_K, q4kBlock(v), got); err != nil {
			t.Fatal(err)
		}
		for j := range 8 {
			lo, hi := 0.0, 0.0
			for _, x := range v[32*j : 32*j+32] {
				lo, hi = min(lo, float64(x)), max(hi, float64(x))
			}
			tol := (hi-lo)/15*0.5 + (hi-lo)*0.02 + 1e-3*math.Max(1, -lo) // half a step plus the 6-bit scale's rounding
			for i := 32 * j; i < 32*j+32; i++ {
				if lo == 0 && hi == 0 && got[i] != 0 {
					t.Fatalf("%s: value %d of a zero sub-block = %v", tt.name, i, got[i])
				}
				if d := math.Abs(float64(got[i] - v[i])); d > tol {
					t.Fatalf("%s: value %d = %v, want %v ± %.3g", tt.name, i, got[i], v[i], tol)
				}
			}
		}
	}
}

// TestSynthRoutingKey: a fine-grained model names its preset in the file;
// a uniform one writes nothing new (its bytes are unchanged).
func TestSynthRoutingKey(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct{ routing, want string }{{RoutingFineGrained, RoutingFineGrained}, {RoutingUniform, ""}} {
		c := SynthConfig{Layers: 2, Experts: 8, ExpertsUsed: 2, Hidden: 128, ExpertFFN: 32, Heads: 2, Vocab: 300, Type: tensor.Q8_0, Seed: 1, Routing: tt.routing}
		path := filepath.Join(t.TempDir(), "m.gguf")
		f, err := os.Create(path)
		if err != nil {
			t.Fatal(err)
		}
		if err := WriteSynthetic(f, c); err != nil {
			t.Fatal(err)
		}
		f.Close()
		m, err := Load(path, Options{Threads: 1})
		if err != nil {
			t.Fatal(err)
		}
		got, _ := m.File.String(SynthRoutingKey)
		m.Close()
		if got != tt.want {
			t.Errorf("routing %s: %s = %q, want %q", tt.routing, SynthRoutingKey, got, tt.want)
		}
	}
}

// TestBalanceLayer: the router biases bring each expert's share of a
// calibration text's demands to its target, from logits whose experts
// start far apart (a per-expert offset of up to two logit standard
// deviations), for an even target and for the preset's popularity.
func TestBalanceLayer(t *testing.T) {
	t.Parallel()
	const n, E, k = 2000, 64, 4
	g := newRNG(5, "balance")
	logits := make([]float32, n*E)
	for i := range logits {
		logits[i] = float32(g.normal() + 2*float64(i%E)/E)
	}
	ks := make([]float32, n)
	for i := range ks {
		ks[i] = 1
	}
	f := &fine{c: &SynthConfig{Experts: E, Seed: 5}}
	even := make([]float64, E)
	for e := range even {
		even[e] = 1
	}
	for _, tt := range []struct {
		name   string
		target []float64
		top10  float64
	}{
		{"even", even, float64(E/10) / E},
		{"popularity", f.popularity(1), fgTop10},
	} {
		bias := balanceLayer(logits, ks, k, tt.target)
		load := make([]float64, E)
		row := make([]float32, E)
		idx := make([]int, k)
		for i := range n {
			for e := range E {
				row[e] = logits[i*E+e] + bias[e]
			}
			topK(row, idx)
			for _, e := range idx {
				load[e]++
			}
		}
		var worst float64
		for e := range load {
			want := float64(n*k) / E * tt.target[e]
			worst = max(worst, math.Abs(load[e]-want)/want)
		}
		sort.Sort(sort.Reverse(sort.Float64Slice(load)))
		var top float64
		for _, x := range load[:E/10] {
			top += x / (n * k)
		}
		if worst > 0.15 || math.Abs(top-tt.top10) > 0.01 {
			t.Errorf("%s: worst expert off its target load by %.0f%%, top-10%% share %.3f (want %.3f)", tt.name, 100*worst, top, tt.top10)
		}
	}
}
