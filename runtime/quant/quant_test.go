package quant

import (
	"bytes"
	"context"
	"errors"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/lesfarm/lesfarm/runtime/expert"
	"github.com/lesfarm/lesfarm/runtime/generate"
	"github.com/lesfarm/lesfarm/runtime/gguf"
	"github.com/lesfarm/lesfarm/runtime/model"
	"github.com/lesfarm/lesfarm/runtime/moe"
	"github.com/lesfarm/lesfarm/runtime/tensor"
)

// synthF16 writes a small random-weight qwen3moe model in F16 whose rows
// (256) fit every K-quant block, so no tensor falls back.
func synthF16(t testing.TB, dir string) string {
	t.Helper()
	p := filepath.Join(dir, "synth-f16.gguf")
	f, err := os.Create(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	cfg := model.SynthConfig{Layers: 2, Experts: 8, ExpertsUsed: 2, Hidden: 256, ExpertFFN: 256, Heads: 4, KVHeads: 2, Vocab: 512, Context: 128, Type: tensor.F16, Seed: 7}
	if err := model.WriteSynthetic(f, cfg); err != nil {
		t.Fatal(err)
	}
	return p
}

// greedyTokens loads path (experts resident, or streamed through the LES
// store in mode at a quarter of the expert bytes) and decodes 10 tokens.
func greedyTokens(t *testing.T, path string, mode expert.Mode, streamed bool) []int {
	t.Helper()
	var src func(f *gguf.File, shapes []moe.LayerShape) (moe.Source, error)
	if streamed {
		src = func(f *gguf.File, shapes []moe.LayerShape) (moe.Source, error) {
			var total int64
			for _, s := range shapes {
				total += int64(s.Experts) * s.Bytes()
			}
			return expert.Open(path, f, shapes, "", expert.Options{Mode: mode, Budget: total / 4})
		}
	}
	m, err := model.Load(path, model.Options{Threads: 1, Experts: src})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	res, err := generate.Run(context.Background(), m, generate.Params{PromptIDs: []int{5, 17, 300, 42}, MaxTokens: 10})
	if err != nil {
		t.Fatal(err)
	}
	return res.TokenIDs
}

// TestQuantizeEveryType quantizes the synthetic F16 model to each target
// type, unpacked and packed, and checks the tensor types (norms and router
// unchanged, matrices at the type), the weights against the source within
// the type's error, and that the file gives the same greedy tokens with
// experts resident and streamed in every LES mode.
func TestQuantizeEveryType(t *testing.T) {
	dir := t.TempDir()
	in := synthF16(t, dir)
	src, err := gguf.Open(in)
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	bound := map[tensor.Type]float64{tensor.Q8_0: 0.01, tensor.Q6_K: 0.03, tensor.Q5_K: 0.05, tensor.Q4_K: 0.1, tensor.Q3_K: 0.2, tensor.Q2_K: 0.4}
	for _, typ := range Types {
		for _, packed := range []bool{false, true} {
			name := typ.String()
			if packed {
				name += "/packed"
			}
			t.Run(name, func(t *testing.T) {
				out := filepath.Join(dir, strings.ReplaceAll(name, "/", "-")+".gguf")
				var last int64
				res, err := Quantize(context.Background(), in, out, Options{Type: typ, Pack: packed, Threads: 2, Progress: func(done, total int64) {
					if done < last || done > total {
						t.Errorf("progress %d/%d after %d", done, total, last)
					}
					last = done
				}})
				if err != nil {
					t.Fatal(err)
				}
				if len(res.FellBack()) != 0 {
					t.Fatalf("fallbacks on 256-wide rows: %+v", res.FellBack())
				}
				if !packed {
					checkTypes(t, src, out, typ, bound[typ])
				}
				want := greedyTokens(t, out, 0, false)
				if len(want) != 10 {
					t.Fatalf("resident run gave %d tokens", len(want))
				}
				for _, mode := range expert.Modes() {
					if got := greedyTokens(t, out, mode, true); !slices.Equal(got, want) {
						t.Fatalf("%s: tokens %v, resident %v", mode, got, want)
					}
				}
			})
		}
	}
}

func checkTypes(t *testing.T, src *gguf.File, out string, typ tensor.Type, bound float64) {
	t.Helper()
	f, err := gguf.Open(out)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if ft, _ := f.Uint("general.file_type"); uint32(ft) != FileType(typ) {
		t.Errorf("general.file_type %d, want %d", ft, FileType(typ))
	}
	if s, _ := f.String(KeyType); s != typ.String() {
		t.Errorf("%s = %q", KeyType, s)
	}
	for _, st := range src.Tensors() {
		ot, ok := f.Tensor(st.Name)
		if !ok {
			t.Fatalf("tensor %s missing", st.Name)
		}
		want := typ
		if len(st.Dims) < 2 || strings.Contains(st.Name, "ffn_gate_inp") {
			want = st.Type
		}
		if ot.Type != want {
			t.Errorf("%s: %s, want %s", st.Name, ot.Type, want)
		}
		if ot.Type == st.Type {
			a, _ := src.ReadTensor(st.Name)
			b, _ := f.ReadTensor(st.Name)
			if !bytes.Equal(a, b) {
				t.Errorf("%s kept its type but not its bytes", st.Name)
			}
			continue
		}
		a, _ := src.ReadTensor(st.Name)
		b, _ := f.ReadTensor(st.Name)
		x := make([]float32, st.Elements())
		y := make([]float32, st.Elements())
		if err := tensor.Dequantize(st.Type, a, x); err != nil {
			t.Fatal(err)
		}
		if err := tensor.Dequantize(ot.Type, b, y); err != nil {
			t.Fatal(err)
		}
		var se, ss float64
		for i := range x {
			d := float64(x[i] - y[i])
			se += d * d
			ss += float64(x[i]) * float64(x[i])
		}
		if rel := math.Sqrt(se / ss); rel > bound {
			t.Errorf("%s at %s: relative RMS error %.4f > %.4f", st.Name, ot.Type, rel, bound)
		}
	}
}

func TestTargetRules(t *testing.T) {
	d := func(xs ...uint64) []uint64 { return xs }
	for _, tc := range []struct {
		name     string
		dims     []uint64
		src      tensor.Type
		want     tensor.Type
		got      tensor.Type
		fellBack bool
		err      error
	}{
		{"blk.0.attn_norm.weight", d(256), tensor.F32, tensor.Q4_K, tensor.F32, false, nil},
		{"blk.0.ffn_gate_inp.weight", d(256, 8), tensor.F16, tensor.Q4_K, tensor.F16, false, nil},
		{"blk.0.attn_q.weight", d(256, 256), tensor.F16, tensor.Q4_K, tensor.Q4_K, false, nil},
		{"blk.0.ffn_down_exps.weight", d(128, 256, 8), tensor.F16, tensor.Q4_K, tensor.Q5_0, true, nil},
		{"blk.0.ffn_down_exps.weight", d(128, 256, 8), tensor.F16, tensor.Q5_K, tensor.Q5_1, true, nil},
		{"blk.0.ffn_down_exps.weight", d(128, 256, 8), tensor.F16, tensor.Q6_K, tensor.Q8_0, true, nil},
		{"blk.0.ffn_down_exps.weight", d(128, 256, 8), tensor.F16, tensor.Q2_K, tensor.Q4_0, true, nil},
		{"blk.0.ffn_down_exps.weight", d(128, 256, 8), tensor.F16, tensor.Q3_K, tensor.Q4_0, true, nil},
		{"output.weight", d(192, 4096), tensor.BF16, tensor.Q8_0, tensor.Q8_0, false, nil},
		{"blk.0.attn_q.weight", d(256, 256), tensor.Q4_K, tensor.Q8_0, 0, false, ErrQuantizedInput},
		{"blk.0.attn_q.weight", d(100, 4), tensor.F32, tensor.Q8_0, 0, false, ErrRowLength},
		{"blk.0.attn_q.weight", d(100, 4), tensor.F32, tensor.Q4_K, 0, false, ErrRowLength},
	} {
		got, fb, err := Target(tc.name, tc.dims, tc.src, tc.want)
		if tc.err != nil {
			if !errors.Is(err, tc.err) {
				t.Errorf("%s %v %s→%s: err %v, want %v", tc.name, tc.dims, tc.src, tc.want, err, tc.err)
			}
			continue
		}
		if err != nil || got != tc.got || fb != tc.fellBack {
			t.Errorf("%s %v %s→%s: got %s %v %v, want %s %v", tc.name, tc.dims, tc.src, tc.want, got, fb, err, tc.got, tc.fellBack)
		}
	}
}

// TestQuantizeBadInput: an already quantized input, rows no type fits, the
// output equal to the input and a packed input are refused before anything
// is written.
func TestQuantizeBadInput(t *testing.T) {
	dir := t.TempDir()
	odd := filepath.Join(dir, "odd.gguf")
	var buf bytes.Buffer
	w := gguf.NewWriter(&buf)
	w.AddKV("general.architecture", "qwen3moe")
	w.AddTensor("blk.0.attn_q.weight", tensor.F32, []uint64{100, 2})
	w.WriteHeader()
	w.WriteTensor("blk.0.attn_q.weight", make([]byte, 800))
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(odd, buf.Bytes(), 0o644)
	in := synthF16(t, dir)
	q := filepath.Join(dir, "q.gguf")
	if _, err := Quantize(context.Background(), in, q, Options{Type: tensor.Q8_0}); err != nil {
		t.Fatal(err)
	}
	packed := filepath.Join(dir, "p.gguf")
	if _, err := Quantize(context.Background(), in, packed, Options{Type: tensor.Q8_0, Pack: true}); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, in, out string
		typ           tensor.Type
		want          string
	}{
		{"quantized input", q, filepath.Join(dir, "x.gguf"), tensor.Q4_K, "already Q8_0"},
		{"odd rows", odd, filepath.Join(dir, "y.gguf"), tensor.Q4_K, "rows of 100 values"},
		{"same path", in, in, tensor.Q4_K, "output path equals the input"},
		{"packed input", packed, filepath.Join(dir, "z.gguf"), tensor.Q4_K, "is packed"},
	} {
		_, err := Quantize(context.Background(), tc.in, tc.out, Options{Type: tc.typ})
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: err %v, want %q", tc.name, err, tc.want)
		}
		if tc.out != tc.in {
			if _, err := os.Stat(tc.out); err == nil {
				t.Errorf("%s: output written despite the error", tc.name)
			}
		}
	}
}

// TestSolveKnapsack compares the DP with brute force on random instances.
func TestSolveKnapsack(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	for range 200 {
		n := 1 + r.IntN(5)
		items := make([][]Option, n)
		for i := range items {
			k := 1 + r.IntN(4)
			for range k {
				items[i] = append(items[i], Option{Bytes: int64(1 + r.IntN(1000)), Err: r.Float64()})
			}
		}
		capacity := int64(r.IntN(3000))
		best, bestErr := -1.0, math.Inf(1)
		var rec func(i int, bytes int64, e float64)
		rec = func(i int, bytes int64, e float64) {
			if bytes > capacity {
				return
			}
			if i == n {
				if e < bestErr {
					bestErr, best = e, e
				}
				return
			}
			for _, o := range items[i] {
				rec(i+1, bytes+o.Bytes, e+o.Err)
			}
		}
		rec(0, 0, 0)
		pick, err := SolveKnapsack(items, capacity)
		if best < 0 {
			if !errors.Is(err, ErrBudgetTooSmall) {
				t.Fatalf("infeasible instance: got %v %v", pick, err)
			}
			continue
		}
		if err != nil {
			t.Fatalf("feasible instance (best %.4f): %v", best, err)
		}
		var bytes int64
		var e float64
		for i, k := range pick {
			bytes += items[i][k].Bytes
			e += items[i][k].Err
		}
		if bytes > capacity || e > best+1e-9 {
			t.Fatalf("DP picked %d bytes (capacity %d), error %.6f, brute force %.6f", bytes, capacity, e, best)
		}
	}
}

// TestPlannerSynth measures the synthetic model on random calibration
// tokens, plans at the size of the uniform Q4_K model, writes the plan into
// the output and reads it back; a budget below the smallest model fails.
func TestPlannerSynth(t *testing.T) {
	dir := t.TempDir()
	in := synthF16(t, dir)
	r := rand.New(rand.NewPCG(5, 6))
	toks := make([]int, 129)
	for i := range toks {
		toks[i] = r.IntN(512)
	}
	sens, err := Measure(context.Background(), in, MeasureConfig{Tokens: toks, Context: 64, Types: []tensor.Type{tensor.Q8_0, tensor.Q4_K, tensor.Q2_K}})
	if err != nil {
		t.Fatal(err)
	}
	if sens.Tokens != 128 || len(sens.Parts) != 2*2+2 {
		t.Fatalf("measured %d tokens, %d parts", sens.Tokens, len(sens.Parts))
	}
	for _, p := range sens.Parts {
		if len(p.Candidates) != 4 || p.Candidates[0].KL != 0 || p.Candidates[0].Type != tensor.F16 {
			t.Fatalf("%s: candidates %+v", Key(p.Layer, p.Part), p.Candidates)
		}
		// Fewer bits, more error (measured, with slack for noise).
		if !(p.Candidates[3].KL > p.Candidates[1].KL) {
			t.Errorf("%s: Q2_K KL %.5f not above Q8_0 %.5f", Key(p.Layer, p.Part), p.Candidates[3].KL, p.Candidates[1].KL)
		}
	}
	uniform := filepath.Join(dir, "u.gguf")
	ures, err := Quantize(context.Background(), in, uniform, Options{Type: tensor.Q4_K})
	if err != nil {
		t.Fatal(err)
	}
	plan, err := sens.Plan(ures.Size)
	if err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "mixed.gguf")
	res, err := Quantize(context.Background(), in, out, Options{Type: tensor.Q8_0, TypeFor: plan.TypeFor(), Meta: plan.Meta(), Label: "mixed"})
	if err != nil {
		t.Fatal(err)
	}
	if res.Size > ures.Size || res.Size > plan.Budget {
		t.Fatalf("mixed model %d bytes exceeds the budget %d", res.Size, plan.Budget)
	}
	f, err := gguf.Open(out)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	back, err := ReadPlan(f)
	if err != nil {
		t.Fatal(err)
	}
	if back.Budget != plan.Budget || back.Method != plan.Method || len(back.Items) != len(plan.Items) {
		t.Fatalf("read back %+v, wrote %+v", back, plan)
	}
	for i, c := range back.Items {
		w := plan.Items[i]
		if c.Layer != w.Layer || c.Part != w.Part || c.Type != w.Type || c.Bytes != w.Bytes || math.Abs(c.Sensitivity-w.Sensitivity) > 1e-6*max(1, w.Sensitivity) {
			t.Fatalf("part %d: read %+v, wrote %+v", i, c, w)
		}
		// The file holds the planned types.
		for _, name := range sens.Parts[i].Tensors {
			if ti, _ := f.Tensor(name); ti.Type != w.Type {
				t.Fatalf("%s is %s, plan says %s", name, ti.Type, w.Type)
			}
		}
	}
	var tbl strings.Builder
	if err := plan.WriteTable(&tbl); err != nil || !strings.Contains(tbl.String(), "| layer | part | type | bytes | sensitivity") {
		t.Fatalf("table: %v\n%s", err, tbl.String())
	}
	if _, err := sens.Plan(sens.MinSize() - 1); !errors.Is(err, ErrBudgetTooSmall) || !strings.Contains(err.Error(), "smallest possible model") {
		t.Fatalf("budget below the minimum: %v", err)
	}
	if _, err := Measure(context.Background(), in, MeasureConfig{Tokens: toks[:10], Context: 64}); !errors.Is(err, ErrNoCalibration) {
		t.Fatalf("short calibration: %v", err)
	}
}
