package model

import (
	"math"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/lesfarm/lesfarm/runtime/tensor"
	"github.com/lesfarm/lesfarm/runtime/tokenizer"
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
// calibration text's demands to an even share, from logits whose experts
// start far apart (a per-expert offset of up to two or four logit
// standard deviations).
func TestBalanceLayer(t *testing.T) {
	t.Parallel()
	const n, E, k = 2000, 64, 4
	for _, spread := range []float64{2, 4} {
		g := newRNG(5, "balance")
		logits := make([]float32, n*E)
		for i := range logits {
			logits[i] = float32(g.normal() + spread*float64(i%E)/E)
		}
		ks, count := make([]float32, n), make([]float32, n)
		var total float64
		for i := range ks {
			ks[i], count[i] = 1, float32(1+i%3) // a token occurring 1-3 times
			total += float64(count[i])
		}
		bias := balanceLayer(logits, ks, count, k)
		load := make([]float64, E)
		row := make([]float32, E)
		idx := make([]int, k)
		for i := range n {
			for e := range E {
				row[e] = logits[i*E+e] + bias[e]
			}
			topK(row, idx)
			for _, e := range idx {
				load[e] += float64(count[i])
			}
		}
		var worst float64
		want := total * k / E
		for e := range load {
			worst = max(worst, math.Abs(load[e]-want)/want)
		}
		sort.Sort(sort.Reverse(sort.Float64Slice(load)))
		var top float64
		for _, x := range load[:E/10] {
			top += x / (total * k)
		}
		if worst > 0.15 || math.Abs(top-float64(E/10)/E) > 0.01 {
			t.Errorf("spread %g: worst expert off an even load by %.0f%%, top-10%% share %.3f (want %.3f)", spread, 100*worst, top, float64(E/10)/E)
		}
	}
}

// TestByteBPELearnt: merges learnt from English split other English into
// word pieces (fewer tokens, the commonest a smaller share), every merge's
// operands are tokens before it, and the same corpus gives the same
// vocabulary.
func TestByteBPELearnt(t *testing.T) {
	t.Parallel()
	text := strings.Join(strings.Fields(routingTestText), " ")
	stats := func(corpus string) (tokens []string, n int, top float64) {
		toks, merges, types, err := byteBPE(2048, 3, corpus)
		if err != nil {
			t.Fatal(err)
		}
		index := map[string]int{}
		for i, s := range toks {
			index[s] = i
		}
		for i, m := range merges {
			a, b, _ := strings.Cut(m, " ")
			if index[a] >= 256+i || index[b] >= 256+i || index[a+b] != 256+i {
				t.Fatalf("merge %d %q: operands or result out of order", i, m)
			}
		}
		tok, err := tokenizer.New(tokenizer.Config{Model: "gpt2", Pre: "qwen35", Tokens: toks, Types: types, Merges: merges, BOS: len(toks) - 1, EOS: len(toks) - 1})
		if err != nil {
			t.Fatal(err)
		}
		ids := tok.Tokenize(text, false, false)
		count := map[int]int{}
		for _, id := range ids {
			count[id]++
			top = max(top, float64(count[id])/float64(len(ids)))
		}
		return toks, len(ids), top
	}
	learnt, n, top := stats(calibrationText)
	_, nRandom, topRandom := stats("")
	t.Logf("%d chars: %d tokens (commonest %.1f%%) learnt, %d (%.1f%%) random", len(text), n, 100*top, nRandom, 100*topRandom)
	if float64(n) > 0.7*float64(nRandom) || top >= topRandom {
		t.Errorf("learnt merges: %d tokens, commonest %.1f%% of them; want at most 70%% of random merges' %d and a smaller share than their %.1f%%", n, 100*top, nRandom, 100*topRandom)
	}
	again, _, _ := stats(calibrationText)
	if !slices.Equal(learnt, again) {
		t.Error("the same corpus learnt a different vocabulary")
	}
}

// routingTestText is English that is not the calibration text (the
// opening of routing-stats' built-in prompts and KJV's Ruth 1).
const routingTestText = `The committee met on Tuesday to review the budget for the coming year, and after a long discussion it agreed to postpone the vote until the auditors had finished their report on the new library and the roads.
To install the package, download the archive, unpack it into a directory of your choice, and run the setup script with the path of your configuration file as its only argument; then restart the service.
Now it came to pass in the days when the judges ruled, that there was a famine in the land. And a certain man of Bethlehemjudah went to sojourn in the country of Moab, he, and his wife, and his two sons.`
