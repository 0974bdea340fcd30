package cli

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestRoutingStatsMatchesTrainedFixture: routing-stats on the trained
// fixture's validation text reproduces the fixture's routing-stats.json
// (measured in PyTorch on the whole held-out split): per-layer reuse
// (temporal_locality) and the lookahead recall at top-4 from the previous
// layer's post-attention state (prev_layer_post_attn, layers 1..5; layer
// 0 from the embedding, prev_layer_output[0]).
func TestRoutingStatsMatchesTrainedFixture(t *testing.T) {
	t.Parallel()
	modelPath := lesFixture(t, "trained/tiny-moe-kjv-f16.gguf")
	dir := filepath.Dir(modelPath)
	raw, err := os.ReadFile(filepath.Join(dir, "routing-stats.json"))
	if err != nil {
		t.Fatal(err)
	}
	var ref struct {
		Temporal struct {
			PerLayer []float64 `json:"per_layer"`
		} `json:"temporal_locality"`
		Cross struct {
			PostAttn struct {
				Recall []*float64 `json:"recall_at_4"`
			} `json:"prev_layer_post_attn"`
			Output struct {
				Recall []*float64 `json:"recall_at_4"`
			} `json:"prev_layer_output"`
		} `json:"cross_layer_predictor"`
	}
	if err := json.Unmarshal(raw, &ref); err != nil {
		t.Fatal(err)
	}
	code, out, errOut := runCLI("routing-stats", "--model", modelPath, "--prompts", filepath.Join(dir, "validation.txt"), "--max-tokens", "128", "--format", "json")
	if code != 0 {
		t.Fatalf("routing-stats: exit %d: %s", code, errOut)
	}
	var got struct {
		Layers []struct {
			Reuse   float64 `json:"reuse"`
			Recall  float64 `json:"recall"`
			Entropy float64 `json:"entropy"`
		} `json:"layers"`
	}
	if err := json.Unmarshal([]byte(out), &got); err != nil || len(got.Layers) != 6 {
		t.Fatalf("json %v: %s", err, out)
	}
	for l, m := range got.Layers {
		want := ref.Cross.Output.Recall[0]
		if l > 0 {
			want = ref.Cross.PostAttn.Recall[l]
		}
		if d := m.Recall - *want; d < -0.08 || d > 0.08 {
			t.Errorf("layer %d: recall %.3f, routing-stats.json %.3f", l, m.Recall, *want)
		}
		if d := m.Reuse - ref.Temporal.PerLayer[l]; d < -0.05 || d > 0.05 {
			t.Errorf("layer %d: reuse %.3f, routing-stats.json %.3f", l, m.Reuse, ref.Temporal.PerLayer[l])
		}
		if m.Entropy < 0.9 || m.Entropy > 1 {
			t.Errorf("layer %d: entropy %.3f outside the fixture's near-even use", l, m.Entropy)
		}
	}
}

// TestRoutingStatsBadInput: each bad invocation exits 2 with one line.
func TestRoutingStatsBadInput(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	notTrace := filepath.Join(dir, "x.trace.gz")
	if err := os.WriteFile(notTrace, []byte("not a trace"), 0o644); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		args []string
		want string
	}{
		{"neither", []string{}, "exactly one of"},
		{"both", []string{"--model", "m", "--trace", "t"}, "exactly one of"},
		{"format", []string{"--trace", "t", "--format", "xml"}, "--format"},
		{"missing trace", []string{"--trace", filepath.Join(dir, "none")}, "does not exist"},
		{"bad trace", []string{"--trace", notTrace}, "x.trace.gz"},
		{"missing model", []string{"--model", filepath.Join(dir, "none.gguf")}, "none.gguf"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			code, _, errOut := runCLI(append([]string{"routing-stats"}, tt.args...)...)
			if code != 2 || !strings.Contains(errOut, tt.want) || strings.Count(strings.TrimSpace(errOut), "\n") > 0 {
				t.Fatalf("exit %d, stderr %q; want exit 2 and one line containing %q", code, errOut, tt.want)
			}
		})
	}
}
