package perplexity

import (
	"context"
	"encoding/json"
	"errors"
	"math"
	"os"
	"slices"
	"testing"

	"github.com/lesfarm/lesfarm/internal/fixture"
	"github.com/lesfarm/lesfarm/runtime/model"
	"github.com/lesfarm/lesfarm/runtime/tokenizer"
)

func TestPlan(t *testing.T) {
	for _, tc := range []struct {
		n       int
		cfg     Config
		windows int
		first   int
		last    int
		short   bool
	}{
		{2037, Config{Method: MethodWindows, Context: 256}, 7, 0, 255, false},
		{2048, Config{Method: MethodWindows, Context: 256}, 7, 0, 255, false},
		{2049, Config{Method: MethodWindows, Context: 256}, 8, 0, 255, false},
		{256, Config{Method: MethodWindows, Context: 256}, 0, 0, 0, true},
		{2037, Config{Method: MethodLlamaCpp, Context: 256}, 7, 128, 254, false},
		{511, Config{Method: MethodLlamaCpp, Context: 256}, 0, 0, 0, true},
		{2037, Config{Method: MethodLlamaCpp, Context: 256, MaxWindows: 3}, 3, 128, 254, false},
	} {
		w, f, l, err := Plan(tc.n, tc.cfg)
		if tc.short {
			if !errors.Is(err, ErrTooShort) {
				t.Errorf("%d %+v: err %v, want too short", tc.n, tc.cfg, err)
			}
			continue
		}
		if err != nil || w != tc.windows || f != tc.first || l != tc.last {
			t.Errorf("%d %+v: got %d windows [%d,%d] %v, want %d [%d,%d]", tc.n, tc.cfg, w, f, l, err, tc.windows, tc.first, tc.last)
		}
	}
}

func TestNLL(t *testing.T) {
	// Uniform logits: -log(1/n).
	if got := NLL(make([]float32, 8), 3); math.Abs(got-math.Log(8)) > 1e-12 {
		t.Fatalf("uniform NLL %v", got)
	}
	// Large logits do not overflow.
	if got := NLL([]float32{1000, 0}, 0); got < 0 || got > 1e-6 || math.IsNaN(got) {
		t.Fatalf("NLL %v", got)
	}
}

// TestTrainedReference reproduces llama.cpp's perplexity of the trained MoE
// on validation.txt (34.4059 over non-overlapping 256-token windows,
// ref.json's perplexity_method) within 1%, from the text itself: the
// tokenization must equal ref.json's ids too.
func TestTrainedReference(t *testing.T) {
	refPath := fixture.Shared(t, "trained/ref.json", "")
	modelPath := fixture.Shared(t, "trained/tiny-moe-kjv-f16.gguf", "")
	text, err := os.ReadFile(fixture.Shared(t, "trained/validation.txt", ""))
	if err != nil {
		t.Fatal(err)
	}
	var ref struct {
		IDs []int `json:"validation_txt_token_ids"`
		MoE struct {
			Perplexity struct {
				Validation struct {
					LlamaCpp struct {
						Tokens int     `json:"tokens_scored"`
						PPL    float64 `json:"ppl"`
					} `json:"llama_cpp"`
				} `json:"validation_txt"`
			} `json:"perplexity"`
		} `json:"moe"`
	}
	b, err := os.ReadFile(refPath)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &ref); err != nil {
		t.Fatal(err)
	}
	m, err := model.Load(modelPath, model.Options{Threads: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	tok, err := tokenizer.FromGGUF(m.File)
	if err != nil {
		t.Fatal(err)
	}
	ids := tok.Tokenize(string(text), true, false)
	if !slices.Equal(ids, ref.IDs) {
		t.Fatalf("validation.txt tokenizes to %d ids, ref.json has %d (or they differ)", len(ids), len(ref.IDs))
	}
	res, err := Run(context.Background(), m, ids, Config{Method: MethodWindows, Context: 256, BOS: -1})
	if err != nil {
		t.Fatal(err)
	}
	want := ref.MoE.Perplexity.Validation.LlamaCpp
	if res.TokensScored != want.Tokens {
		t.Fatalf("scored %d tokens, llama.cpp %d", res.TokensScored, want.Tokens)
	}
	if rel := math.Abs(res.PPL-want.PPL) / want.PPL; rel > 0.01 {
		t.Fatalf("ppl %.4f, llama.cpp %.4f (%.2f%% off, want within 1%%)", res.PPL, want.PPL, 100*rel)
	}
	t.Logf("windows method: ppl %.4f (llama.cpp %.4f), %d tokens scored", res.PPL, want.PPL, res.TokensScored)

	// llama.cpp's default method on the same text: 7 windows, second
	// halves scored (127 tokens each).
	d, err := Run(context.Background(), m, ids, Config{Method: MethodLlamaCpp, BOS: -1})
	if err != nil {
		t.Fatal(err)
	}
	if d.Context != 256 || d.Windows != 7 || d.TokensScored != 7*127 {
		t.Fatalf("llama.cpp method: %+v", d)
	}
	// A different token subset, but the same model: within a factor of
	// 1.5 of the all-positions figure.
	if !(d.PPL > res.PPL/1.5 && d.PPL < res.PPL*1.5) {
		t.Fatalf("llama.cpp method ppl %.3f far from the all-positions %.3f", d.PPL, res.PPL)
	}
	t.Logf("llama.cpp method: ppl %.4f over %d tokens", d.PPL, d.TokensScored)
}
