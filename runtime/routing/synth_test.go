package routing

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/lesfarm/lesfarm/runtime/model"
	"github.com/lesfarm/lesfarm/runtime/tensor"
	"github.com/lesfarm/lesfarm/runtime/tokenizer"
)

// synthTexts are plain English prompts, one sequence each.
var synthTexts = []string{
	"The committee met on Tuesday to review the budget for the coming year, and after a long discussion it agreed to postpone the vote until the auditors had finished their report on the new library and the roads.",
	"In the beginning God created the heaven and the earth. And the earth was without form, and void; and darkness was upon the face of the deep.",
	"To install the package, download the archive, unpack it into a directory of your choice, and run the setup script with the path of your configuration file as its only argument; then restart the service.",
	"She walked down to the harbour in the early morning, when the fishing boats were coming in and the gulls were crying over the nets, and bought bread, cheese and a bag of oranges for the journey north.",
}

// synthStats writes a small model of the given architecture and routing
// preset (256 experts, top-8, 8 layers: the preset's expert geometry) and
// measures it with the runtime's own forward pass and predictor.
func synthStats(t *testing.T, arch, routing string) *Stats {
	t.Helper()
	c := model.SynthConfig{Arch: arch, Layers: 8, Experts: 256, ExpertsUsed: 8, Hidden: 256, ExpertFFN: 32, Heads: 4, KVHeads: 2,
		Vocab: 2048, Context: 512, Type: tensor.Q4_K, Seed: 3, Routing: routing}
	if arch == "qwen35moe" {
		c.SSMState = 64
	}
	path := filepath.Join(t.TempDir(), "m.gguf")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := model.WriteSynthetic(f, c); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	m, err := model.Load(path, model.Options{Threads: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	tok, err := tokenizer.FromGGUF(m.File)
	if err != nil {
		t.Fatal(err)
	}
	var seqs [][]int
	for _, s := range synthTexts {
		seqs = append(seqs, tok.Tokenize(s, true, false))
	}
	rs, err := Measure(context.Background(), m, seqs)
	if err != nil {
		t.Fatal(err)
	}
	st, err := Compute(rs, len(m.Layers), m.ExpertCount)
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// top10Ceiling bounds the fine-grained models' top-10% share on
// synthTexts (532 tokens): with 256 experts that is 17 demands per
// expert, and with the target's reuse a router that is even in
// expectation already reads about 0.21 there (docs/les.md, "Realistic
// routing"), so the 0.150 target itself is not asserted on this short
// text; before the router biases the models read 0.50.
const top10Ceiling = 0.26

// TestFineGrainedMeetsTargets: a fine-grained-moe model's own forward pass
// routes within ±10% of the preset's lookahead, reuse, verify and entropy
// targets (recall ≥ 0.9) on both architectures, with a top-10% share
// under top10Ceiling, where a uniform one of the same geometry meets none
// of the lookahead, reuse and verify targets.
func TestFineGrainedMeetsTargets(t *testing.T) {
	t.Parallel()
	asserted := map[string]bool{"recall": true, "reuse": true, "verify×4": true, "reuse@8": true, "entropy": true}
	for _, arch := range []string{"qwen3moe", "qwen35moe"} {
		t.Run(arch, func(t *testing.T) {
			t.Parallel()
			fine := synthStats(t, arch, "fine-grained-moe").Overall
			uni := synthStats(t, arch, "uniform").Overall
			for _, tg := range FineGrainedTargets {
				got := tg.Of(fine)
				t.Logf("%-9s fine-grained %.3f  uniform %.3f  target %.3f", tg.Name, got, tg.Of(uni), tg.Value)
				if !asserted[tg.Name] {
					continue
				}
				if !tg.Met(got) {
					t.Errorf("%s = %.3f, want %.3f ± 10%% (%s)", tg.Name, got, tg.Value, tg.Source)
				}
				// Normalised entropy is near 1 for any routing that is not
				// collapsed, so ±10% of 0.986 cannot tell the presets apart.
				if tg.Name != "entropy" && tg.Met(tg.Of(uni)) {
					t.Errorf("uniform routing meets the %s target too (%.3f): the test cannot tell the presets apart", tg.Name, tg.Of(uni))
				}
			}
			if fine.Top10Share > top10Ceiling {
				t.Errorf("top-10%% share = %.3f, want at most %.2f on this text", fine.Top10Share, top10Ceiling)
			}
		})
	}
}
