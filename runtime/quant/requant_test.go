package quant

import (
	"context"
	"errors"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"testing"

	"github.com/lesfarm/lesfarm/runtime/expert"
	"github.com/lesfarm/lesfarm/runtime/gguf"
	"github.com/lesfarm/lesfarm/runtime/tensor"
)

// TestRequantize plans and writes a Q4_K model (what lesfarm synth writes
// when no F16 source exists) with Requantize: without it the input is
// refused; with it each part's candidates are Q4_K (the input, KL 0) and
// only the requested types that make it smaller, the plan fits a budget
// below the input's size, and the file holds the planned types.
func TestRequantize(t *testing.T) {
	dir := t.TempDir()
	in := filepath.Join(dir, "q4k.gguf")
	if _, err := Quantize(context.Background(), synthF16(t, dir), in, Options{Type: tensor.Q4_K}); err != nil {
		t.Fatal(err)
	}
	types := []tensor.Type{tensor.Q8_0, tensor.Q6_K, tensor.Q3_K, tensor.Q2_K}
	for _, tc := range []struct {
		name    string
		requant bool
		err     error
	}{{"refused", false, ErrQuantizedInput}, {"requantized", true, nil}} {
		f, err := gguf.Open(in)
		if err != nil {
			t.Fatal(err)
		}
		_, _, err = Bounds(f, types, tc.requant)
		f.Close()
		if !errors.Is(err, tc.err) {
			t.Fatalf("%s: Bounds err %v, want %v", tc.name, err, tc.err)
		}
		_, err = Quantize(context.Background(), in, filepath.Join(dir, tc.name+"-u.gguf"), Options{Type: tensor.Q2_K, Requantize: tc.requant})
		if !errors.Is(err, tc.err) {
			t.Fatalf("%s: Quantize err %v, want %v", tc.name, err, tc.err)
		}
	}
	r := rand.New(rand.NewPCG(8, 9))
	toks := make([]int, 65)
	for i := range toks {
		toks[i] = r.IntN(512)
	}
	sens, err := Measure(context.Background(), in, MeasureConfig{Tokens: toks, Context: 64, Types: types, Requantize: true})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range sens.Parts {
		got := make([]tensor.Type, len(p.Candidates))
		for i, c := range p.Candidates {
			got[i] = c.Type
		}
		if len(got) != 3 || got[0] != tensor.Q4_K || got[1] != tensor.Q3_K || got[2] != tensor.Q2_K || p.Candidates[0].KL != 0 {
			t.Fatalf("%s: candidates %v (want Q4_K, Q3_K, Q2_K)", Key(p.Layer, p.Part), got)
		}
		if !(p.Candidates[2].KL > 0) {
			t.Errorf("%s: Q2_K KL %.6f, want > 0", Key(p.Layer, p.Part), p.Candidates[2].KL)
		}
	}
	budget := (sens.MinSize() + sens.MaxSize()) / 2
	plan, err := sens.Plan(budget)
	if err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "mixed.gguf")
	res, err := Quantize(context.Background(), in, out, Options{Type: tensor.Q8_0, TypeFor: plan.TypeFor(), Meta: plan.Meta(), Label: "mixed", Requantize: true})
	if err != nil {
		t.Fatal(err)
	}
	if res.Size > budget {
		t.Fatalf("requantized plan wrote %d bytes, budget %d", res.Size, budget)
	}
	f, err := gguf.Open(out)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	kinds := map[tensor.Type]bool{}
	for i, it := range plan.Items {
		kinds[it.Type] = true
		for _, name := range sens.Parts[i].Tensors {
			if ti, _ := f.Tensor(name); ti.Type != it.Type {
				t.Fatalf("%s is %s, plan says %s", name, ti.Type, it.Type)
			}
		}
	}
	if len(kinds) < 2 {
		t.Fatalf("plan at the midpoint budget uses one type: %v", kinds)
	}
	// The file decodes (experts resident and streamed) to the same tokens.
	if a, b := greedyTokens(t, out, 0, false), greedyTokens(t, out, expert.Scheduled, true); len(a) == 0 || !slices.Equal(a, b) {
		t.Fatalf("resident %v, streamed %v", a, b)
	}
}
