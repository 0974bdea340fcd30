package bench

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/lesfarm/lesfarm/internal/fixture"

	"github.com/lesfarm/lesfarm/runtime/model"
	"github.com/lesfarm/lesfarm/runtime/tensor"
)

func writeSynth(t *testing.T, c model.SynthConfig) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "m.gguf")
	f, err := os.Create(p)
	if err != nil {
		t.Fatal(err)
	}
	if err := model.WriteSynthetic(f, c); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestRunSpec drafts a synthetic model with itself (every draft accepted)
// and checks the rows and their table.
func TestRunSpec(t *testing.T) {
	c := model.SynthConfig{Layers: 2, Experts: 8, ExpertsUsed: 2, Hidden: 64, ExpertFFN: 64, Heads: 2, Vocab: 300, Context: 64, Type: tensor.F32, Seed: 3}
	p := writeSynth(t, c)
	rows, err := RunSpec(context.Background(), SpecConfig{Model: p, Draft: p, Ks: []int{2, 4}, Repetitions: 2, PromptTokens: 8, GenTokens: 16})
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != 3 || rows[0].K != 0 || rows[1].K != 2 || rows[2].K != 4 {
		t.Fatalf("rows %+v", rows)
	}
	for _, r := range rows {
		if len(r.Samples) != 2 || r.TPS <= 0 || r.Speedup <= 0 {
			t.Fatalf("row %+v", r)
		}
	}
	if rows[1].AcceptanceRate != 1 || rows[2].TokensPerTargetPass <= 2 || rows[0].Speedup != 1 {
		t.Fatalf("self-draft rows %+v", rows)
	}
	var b bytes.Buffer
	if err := WriteSpecRows(&b, rows, "md"); err != nil {
		t.Fatal(err)
	}
	if out := b.String(); strings.Count(out, "\n") != 5 || !strings.Contains(out, "tg16+draft") || !strings.Contains(out, "| 1.000 |") {
		t.Fatalf("table:\n%s", out)
	}
	for _, tc := range []struct {
		format string
		lines  int
		has    string
	}{{"csv", 4, "tokens_per_target_pass"}, {"jsonl", 3, `"acceptance_rate":1`}, {"json", 0, `"k": 4`}} {
		b.Reset()
		if err := WriteSpecRows(&b, rows, tc.format); err != nil {
			t.Fatal(err)
		}
		out := b.String()
		if (tc.lines > 0 && strings.Count(out, "\n") != tc.lines) || !strings.Contains(out, tc.has) {
			t.Fatalf("%s:\n%s", tc.format, out)
		}
	}
	if err := WriteSpecRows(&b, rows, "xml"); err == nil {
		t.Fatal("xml accepted")
	}
}

func TestRunSpecErrors(t *testing.T) {
	a := writeSynth(t, model.SynthConfig{Layers: 1, Experts: 4, ExpertsUsed: 2, Hidden: 64, ExpertFFN: 64, Heads: 2, Vocab: 300, Context: 32, Type: tensor.F32})
	b := writeSynth(t, model.SynthConfig{Arch: "qwen3", Layers: 1, Hidden: 32, ExpertFFN: 64, Heads: 2, Vocab: 400, Context: 32, Type: tensor.F32})
	for _, cfg := range []SpecConfig{
		{Model: a},
		{Model: a, Draft: b},
		{Model: a, Draft: a, PromptTokens: 30, GenTokens: 8},
		{Model: a, Draft: filepath.Join(t.TempDir(), "missing.gguf")},
	} {
		if _, err := RunSpec(context.Background(), cfg); err == nil {
			t.Fatalf("%+v: no error", cfg)
		} else {
			t.Log(err)
		}
	}
}

// TestRunSpecTrained prints the side-by-side table for the trained MoE and
// its draft (LESFARM_FULL=1; seconds of decoding).
func TestRunSpecTrained(t *testing.T) {
	if os.Getenv("LESFARM_FULL") == "" {
		t.Skip("set LESFARM_FULL=1 to measure the trained pair")
	}
	dir := filepath.Join(fixture.SharedDir(), "trained")
	m, d := filepath.Join(dir, "tiny-moe-kjv-f16.gguf"), filepath.Join(dir, "tiny-draft-kjv-f32.gguf")
	if _, err := os.Stat(d); err != nil {
		fixture.Missing(t, d, err, "the trained-pair speculative benchmark")
	}
	// "And the LORD spake unto Moses, saying," (ref.json prompt ids).
	prompt := []int{1870, 262, 406, 1581, 35, 599, 539, 1418, 78, 337, 418, 274, 11, 2282, 11}
	rows, err := RunSpec(context.Background(), SpecConfig{Model: m, Draft: d, Ks: []int{2, 4}, Repetitions: 5, PromptIDs: prompt, GenTokens: 64})
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	if err := WriteSpecRows(&b, rows, "md"); err != nil {
		t.Fatal(err)
	}
	t.Log("\n" + b.String())
}
