package quant

import (
	"bytes"
	"context"
	"errors"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/lesfarm/lesfarm/internal/fixture"
	"github.com/lesfarm/lesfarm/runtime/gguf"
	"github.com/lesfarm/lesfarm/runtime/model"
	"github.com/lesfarm/lesfarm/runtime/tensor"
)

// synthQwen35 writes a small random-weight qwen35moe model in F32 shaped
// like the golden fixture where it matters to the planner: routed and
// shared experts 64 wide (ffn_down rows of 64 fit no K-quant block),
// DeltaNet v heads of 32 (ssm_out rows of 64), ssm_alpha/ssm_beta with 4
// output rows, and one NextN block.
func synthQwen35(t testing.TB, dir string) string {
	t.Helper()
	p := filepath.Join(dir, "synth-qwen35moe-f32.gguf")
	f, err := os.Create(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	cfg := model.SynthConfig{Arch: "qwen35moe", Layers: 4, Experts: 8, ExpertsUsed: 2, Hidden: 256, ExpertFFN: 64, Heads: 4, KVHeads: 2, Vocab: 512, Context: 128, Type: tensor.F32, Seed: 11}
	if err := model.WriteSynthetic(f, cfg); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestGroupPartsFallback checks, per part of a qwen35moe model, which
// requested types are candidates, what each stores after the per-tensor
// fallbacks, and that the candidate's bytes are exactly what Quantize
// writes for the part (PlanTypes, the same decisions).
func TestGroupPartsFallback(t *testing.T) {
	t.Parallel()
	in := synthQwen35(t, t.TempDir())
	f, err := gguf.Open(in)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	parts, fixed, err := groupParts(f, Types, false)
	if err != nil {
		t.Fatal(err)
	}
	if fixed <= 0 {
		t.Fatalf("fixed bytes %d", fixed)
	}
	byKey := map[string]PartSensitivity{}
	for _, p := range parts {
		byKey[Key(p.Layer, p.Part)] = p
	}
	// Every tensor is in exactly one part.
	seen := map[string]bool{}
	for _, p := range parts {
		for _, n := range p.Tensors {
			if seen[n] {
				t.Fatalf("%s in two parts", n)
			}
			seen[n] = true
		}
	}
	for _, tc := range []struct {
		part   string
		want   tensor.Type
		stored string // the candidate's Stored; "-" for no such candidate
		note   bool   // a NextN part: proxy sensitivities
	}{
		{"blk.0.experts", tensor.Q6_K, "Q8_0: ffn_down_exps", false},
		{"blk.0.experts", tensor.Q4_K, "Q5_0: ffn_down_exps", false},
		{"blk.0.experts", tensor.Q2_K, "Q4_0: ffn_down_exps", false},
		{"blk.0.shared_expert", tensor.Q5_K, "Q5_1: ffn_down_shexp", false},
		{"blk.0.attention", tensor.Q8_0, "", false},
		{"blk.0.attention", tensor.Q6_K, "Q8_0: ssm_out", false},
		{"blk.3.attention", tensor.Q4_K, "", false}, // full attention: every row is 256 wide
		{"token_embd", tensor.Q3_K, "", false},
		{"blk.4.experts", tensor.Q8_0, "", true},
		{"blk.4.experts", tensor.Q4_K, "Q5_0: ffn_down_exps", true},
	} {
		p, ok := byKey[tc.part]
		if !ok {
			t.Fatalf("%s: no such part in %v", tc.part, keys(parts))
		}
		if (p.Note != "") != tc.note {
			t.Errorf("%s: note %q", tc.part, p.Note)
		}
		var c *Candidate
		for i := range p.Candidates {
			if p.Candidates[i].Type == tc.want {
				c = &p.Candidates[i]
			}
		}
		if tc.stored == "-" {
			if c != nil {
				t.Errorf("%s: unexpected candidate %+v", tc.part, *c)
			}
			continue
		}
		if c == nil {
			t.Fatalf("%s: no %s candidate in %+v", tc.part, tc.want, p.Candidates)
		}
		if c.Stored != tc.stored {
			t.Errorf("%s at %s: stored %q, want %q", tc.part, tc.want, c.Stored, tc.stored)
		}
		// Exactness: the bytes Quantize writes for the part at this type.
		res, err := PlanTypes(f, Options{Type: tensor.Q8_0, TypeFor: func(name string) (tensor.Type, bool) { return tc.want, true }})
		if err != nil {
			t.Fatal(err)
		}
		var got int64
		for _, r := range res {
			l, part := PartOf(r.Name)
			if Key(l, part) == tc.part && Quantizable(r.Name, len(mustTensor(t, f, r.Name).Dims)) {
				got += r.Bytes
			}
		}
		if got != c.Bytes {
			t.Errorf("%s at %s: candidate says %d bytes, Quantize writes %d", tc.part, tc.want, c.Bytes, got)
		}
	}
	// Candidates are distinct storages, most bytes first, the input first.
	for _, p := range parts {
		if p.Candidates[0].Type != tensor.F32 {
			t.Errorf("%s: first candidate %s", Key(p.Layer, p.Part), p.Candidates[0].Type)
		}
		for i := 1; i < len(p.Candidates); i++ {
			if p.Candidates[i].Bytes > p.Candidates[i-1].Bytes {
				t.Errorf("%s: candidates not sorted: %+v", Key(p.Layer, p.Part), p.Candidates)
			}
		}
	}
}

func keys(parts []PartSensitivity) []string {
	var out []string
	for _, p := range parts {
		out = append(out, Key(p.Layer, p.Part))
	}
	return out
}

func mustTensor(t *testing.T, f *gguf.File, name string) *gguf.TensorInfo {
	t.Helper()
	ti, ok := f.Tensor(name)
	if !ok {
		t.Fatalf("no tensor %s", name)
	}
	return ti
}

// TestPlannerQwen35 measures a qwen35moe model, plans at about the uniform
// Q4_K size, writes the mixed model and checks: it fits, every tensor holds the
// plan's type or its fallback, each part's bytes are the plan's, the plan
// reads back, and the model loads and decodes.
func TestPlannerQwen35(t *testing.T) {
	dir := t.TempDir()
	in := synthQwen35(t, dir)
	r := rand.New(rand.NewPCG(7, 8))
	toks := make([]int, 65)
	for i := range toks {
		toks[i] = r.IntN(512)
	}
	sens, err := Measure(context.Background(), in, MeasureConfig{Tokens: toks, Context: 32, Types: []tensor.Type{tensor.Q8_0, tensor.Q6_K, tensor.Q4_K}})
	if err != nil {
		t.Fatal(err)
	}
	// The NextN block's parts carry the decoder layers' largest KL per
	// (part, type) as a proxy.
	nextN := 0
	for _, p := range sens.Parts {
		if p.Note == "" {
			continue
		}
		nextN++
		for _, c := range p.Candidates[1:] {
			var want float64
			for _, q := range sens.Parts {
				if q.Note == "" && q.Layer >= 0 && q.Part == p.Part {
					for _, d := range q.Candidates[1:] {
						if d.Type == c.Type {
							want = max(want, d.KL)
						}
					}
				}
			}
			if c.KL != want || want <= 0 {
				t.Errorf("%s at %s: proxy KL %g, want %g", Key(p.Layer, p.Part), c.Type, c.KL, want)
			}
		}
	}
	if nextN != 3 {
		t.Fatalf("%d NextN parts, want 3", nextN)
	}
	uniform := filepath.Join(dir, "u.gguf")
	ures, err := Quantize(context.Background(), in, uniform, Options{Type: tensor.Q4_K})
	if err != nil {
		t.Fatal(err)
	}
	// The planner counts worst-case padding, so a plan at exactly the
	// uniform size may not fit when Q4_K is the smallest candidate.
	plan, err := sens.Plan(max(ures.Size, sens.MinSize()))
	if err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "mixed.gguf")
	res, err := Quantize(context.Background(), in, out, Options{Type: tensor.Q8_0, TypeFor: plan.TypeFor(), Meta: plan.Meta(), Label: "mixed"})
	if err != nil {
		t.Fatal(err)
	}
	if res.Size > plan.Budget {
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
	if len(back.Items) != len(plan.Items) {
		t.Fatalf("read back %d parts, wrote %d", len(back.Items), len(plan.Items))
	}
	for i, c := range back.Items {
		w := plan.Items[i]
		if c.Layer != w.Layer || c.Part != w.Part || c.Type != w.Type || c.Bytes != w.Bytes {
			t.Fatalf("part %d: read %+v, wrote %+v", i, c, w)
		}
		var bytes int64
		for _, name := range sens.Parts[i].Tensors {
			ti := mustTensor(t, f, name)
			want, _, _ := Target(name, ti.Dims, tensor.F32, w.Type)
			if ti.Type != want {
				t.Fatalf("%s is %s, plan says %s (stored %s)", name, ti.Type, w.Type, want)
			}
			bytes += ti.Size
		}
		if bytes != w.Bytes {
			t.Fatalf("%s: file holds %d bytes, plan says %d", Key(w.Layer, w.Part), bytes, w.Bytes)
		}
	}
	var tbl bytes.Buffer
	if err := plan.WriteTable(&tbl); err != nil || !strings.Contains(tbl.String(), "shared_expert") || !strings.Contains(tbl.String(), "NextN") {
		t.Fatalf("table: %v\n%s", err, tbl.String())
	}
	m, err := model.Load(out, model.Options{Threads: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	st, err := m.NewState(16)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.Forward(context.Background(), toks[:8], false); err != nil {
		t.Fatal(err)
	}
}

// TestPlannerBadInput: a budget below the smallest model, a calibration
// text shorter than one window, and an architecture the planner does not
// know each give one clear error.
func TestPlannerBadInput(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	in := synthQwen35(t, dir)
	llama := filepath.Join(dir, "llama.gguf")
	writeArch(t, llama, "llama")
	for _, tc := range []struct {
		name string
		run  func() error
		is   error
		want []string
	}{
		{"budget below the minimum", func() error {
			f, err := gguf.Open(in)
			if err != nil {
				return err
			}
			defer f.Close()
			parts, fixed, err := groupParts(f, Types, false)
			if err != nil {
				return err
			}
			s := &Sensitivity{Parts: parts, Fixed: fixed}
			_, err = s.Plan(s.MinSize() - 1)
			return err
		}, ErrBudgetTooSmall, []string{"smallest possible model", "raise --budget to at least"}},
		{"calibration shorter than a window", func() error {
			_, err := Measure(context.Background(), in, MeasureConfig{Tokens: []int{1, 2, 3, 4, 5}, Context: 32})
			return err
		}, ErrNoCalibration, []string{"5 tokens", "at least 33"}},
		{"unknown architecture (Bounds)", func() error {
			f, err := gguf.Open(llama)
			if err != nil {
				return err
			}
			defer f.Close()
			_, _, err = Bounds(f, nil, false)
			return err
		}, ErrUnknownArch, []string{"llama", "qwen3, qwen3moe, qwen35moe"}},
		{"unknown architecture (Measure)", func() error {
			_, err := Measure(context.Background(), llama, MeasureConfig{Tokens: make([]int, 100)})
			return err
		}, ErrUnknownArch, []string{"llama", "qwen35moe"}},
	} {
		err := tc.run()
		if !errors.Is(err, tc.is) {
			t.Errorf("%s: got %v, want %v", tc.name, err, tc.is)
			continue
		}
		msg := err.Error()
		if strings.Contains(msg, "\n") {
			t.Errorf("%s: error spans lines: %q", tc.name, msg)
		}
		for _, w := range tc.want {
			if !strings.Contains(msg, w) {
				t.Errorf("%s: %q lacks %q", tc.name, msg, w)
			}
		}
	}
}

// writeArch writes a minimal GGUF of architecture arch with one F32 matrix.
func writeArch(t *testing.T, path, arch string) {
	t.Helper()
	var buf bytes.Buffer
	w := gguf.NewWriter(&buf)
	if err := w.AddKV("general.architecture", arch); err != nil {
		t.Fatal(err)
	}
	if err := w.AddTensor("blk.0.attn_q.weight", tensor.F32, []uint64{32, 2}); err != nil {
		t.Fatal(err)
	}
	if err := w.WriteHeader(); err != nil {
		t.Fatal(err)
	}
	if err := w.WriteTensor("blk.0.attn_q.weight", make([]byte, 32*2*4)); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestPlannerQwen35Fixture groups the shared qwen35moe fixture (F32) into
// parts and bounds its plans (the failure of issue 31 was here); skipped
// without ../shared/testdata, failed under LESFARM_FIXTURES=require.
func TestPlannerQwen35Fixture(t *testing.T) {
	t.Parallel()
	in := fixture.Shared(t, "qwen35moe/tiny-qwen35moe-f32.gguf", "the planner on the qwen35moe fixture")
	f, err := gguf.Open(in)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	minSize, maxSize, err := Bounds(f, nil, false)
	if err != nil {
		t.Fatal(err)
	}
	if minSize <= 0 || minSize >= maxSize || maxSize < 45_000_000 {
		t.Fatalf("bounds %d..%d", minSize, maxSize)
	}
	parts, _, err := groupParts(f, Types, false)
	if err != nil {
		t.Fatal(err)
	}
	// 8 decoder layers × (attention, experts, shared expert) + the NextN
	// block's three + token_embd and output.
	if len(parts) != 8*3+3+2 {
		t.Fatalf("%d parts: %v", len(parts), keys(parts))
	}
}
