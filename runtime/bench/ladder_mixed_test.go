package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/lesfarm/lesfarm/profile"
	"github.com/lesfarm/lesfarm/runtime/expert"
	"github.com/lesfarm/lesfarm/runtime/model"
	"github.com/lesfarm/lesfarm/runtime/quant"
	"github.com/lesfarm/lesfarm/runtime/tensor"
	"github.com/lesfarm/lesfarm/runtime/units"
)

// TestLadderMixedRow runs the ladder on a synthetic F16 model with the
// +mixed-precision row on its Q4_K quantization and checks the row in
// every output format.
func TestLadderMixedRow(t *testing.T) {
	dir := t.TempDir()
	ref := filepath.Join(dir, "f16.gguf")
	f, err := os.Create(ref)
	if err != nil {
		t.Fatal(err)
	}
	if err := model.WriteSynthetic(f, model.SynthConfig{Layers: 2, Experts: 8, ExpertsUsed: 2, Hidden: 256, ExpertFFN: 256, Heads: 4, KVHeads: 2, Vocab: 512, Context: 300, Type: tensor.F16, Seed: 3}); err != nil {
		t.Fatal(err)
	}
	f.Close()
	mixed := filepath.Join(dir, "q4k.gguf")
	if _, err := quant.Quantize(context.Background(), ref, mixed, quant.Options{Type: tensor.Q4_K, Pack: true, Threads: 2}); err != nil {
		t.Fatal(err)
	}
	prof, err := profile.Load("phone-flagship")
	if err != nil {
		t.Fatal(err)
	}
	ids := make([]int, 300)
	for i := range ids {
		ids[i] = (i * 37) % 512
	}
	rep, err := RunLadder(context.Background(), LadderConfig{Model: ref, Profile: prof, Budget: units.Budget{Fraction: 0.25}, Repetitions: 1, Warmup: 1, PromptTokens: 4, GenTokens: 6,
		Modes: []expert.Mode{expert.OnDemand, expert.Scheduled}, NoOracle: true, NoSpeculative: true, Mixed: mixed, PerplexityIDs: ids})
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Rows) != 3 {
		t.Fatalf("%d rows", len(rep.Rows))
	}
	row := rep.Rows[2]
	x := row.MixedRow
	if row.Mode != MixedMode || x == nil || row.DecodeTokensPerSecond <= 0 || x.SpeedupVsScheduled <= 0 || row.SpeedupVsOnDemand <= 0 {
		t.Fatalf("mixed row %+v %+v", row, x)
	}
	if x.Perplexity <= 0 || x.ReferencePerplexity <= 0 || !strings.Contains(x.PerplexityMethod, "windows, context 256") {
		t.Fatalf("perplexities %+v", x)
	}
	if x.MixedModelBytes >= x.ReferenceModelBytes || x.ExpertBytes <= 0 || x.IdenticalOutputApplies || x.Note != MixedNote {
		t.Fatalf("sizes/note %+v", x)
	}
	// Smaller experts under the same budget: fewer bytes read per token.
	if row.BytesReadPerToken >= rep.Rows[1].BytesReadPerToken {
		t.Errorf("mixed reads %.0f B/token, scheduled %.0f", row.BytesReadPerToken, rep.Rows[1].BytesReadPerToken)
	}
	var buf bytes.Buffer
	if err := rep.Write(&buf, "json"); err != nil {
		t.Fatal(err)
	}
	var obj struct {
		Rows []map[string]json.RawMessage `json:"rows"`
	}
	if err := json.Unmarshal(buf.Bytes(), &obj); err != nil {
		t.Fatal(err)
	}
	if _, ok := obj.Rows[0]["note"]; ok {
		t.Fatal("the mixed fields leak into other rows")
	}
	for _, k := range []string{"speedup_vs_scheduled", "perplexity", "reference_perplexity", "identical_output_applies", "note", "plan_budget_bytes", "mixed_model_bytes"} {
		if _, ok := obj.Rows[2][k]; !ok {
			t.Errorf("mixed row lacks %s", k)
		}
	}
	for _, format := range []string{"md", "csv", "jsonl"} {
		buf.Reset()
		if err := rep.Write(&buf, format); err != nil {
			t.Fatal(err)
		}
		out := buf.String()
		switch format {
		case "md":
			if !strings.Contains(out, "| +mixed-precision |") || !strings.Contains(out, "| n/a |") || !strings.Contains(out, "× scheduled") || !strings.Contains(out, "identical_output does not apply") {
				t.Errorf("md:\n%s", out)
			}
		case "csv":
			lines := strings.Split(strings.TrimSpace(out), "\n")
			if len(lines) != 4 || !strings.HasSuffix(lines[0], "speedup_vs_scheduled,mixed_model_bytes,reference_model_bytes,plan_budget_bytes,perplexity,reference_perplexity,identical_output_applies") || !strings.Contains(lines[3], "mixed-precision") || !strings.Contains(lines[3], "n/a") {
				t.Errorf("csv:\n%s", out)
			}
		case "jsonl":
			lines := strings.Split(strings.TrimSpace(out), "\n")
			if len(lines) != 3 || !strings.Contains(lines[2], `"mode":"mixed-precision"`) || !strings.Contains(lines[2], `"identical_output_applies":false`) {
				t.Errorf("jsonl:\n%s", out)
			}
		}
	}
}
