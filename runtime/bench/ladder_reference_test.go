package bench

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/lesfarm/lesfarm/profile"
	"github.com/lesfarm/lesfarm/runtime/expert"
	"github.com/lesfarm/lesfarm/runtime/model"
	"github.com/lesfarm/lesfarm/runtime/tensor"
	"github.com/lesfarm/lesfarm/runtime/units"
)

// TestLadderReference: the ladder's exactness reference comes from a
// recorded file or from the streamed on-demand mode, never from an
// all-resident load unless asked; a recorded reference is checked (a
// corrupted one makes every rung not identical, one of another model is
// refused).
func TestLadderReference(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "m.gguf")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := model.WriteSynthetic(f, model.SynthConfig{Layers: 2, Experts: 8, ExpertsUsed: 2, Hidden: 128, ExpertFFN: 128, Heads: 4, KVHeads: 2, Vocab: 512, Context: 64, Type: tensor.Q8_0, Seed: 5}); err != nil {
		t.Fatal(err)
	}
	f.Close()
	prof, err := profile.Load("phone-flagship")
	if err != nil {
		t.Fatal(err)
	}
	base := LadderConfig{Model: path, Profile: prof, Budget: units.Budget{Fraction: 0.25}, Repetitions: 1, Warmup: 1, PromptTokens: 4, GenTokens: 6,
		Modes: []expert.Mode{expert.OnDemand, expert.Scheduled}, NoOracle: true, NoSpeculative: true}
	run := func(t *testing.T, edit func(*LadderConfig)) (*LadderReport, error) {
		t.Helper()
		c := base
		edit(&c)
		return RunLadder(context.Background(), c)
	}
	identical := func(rep *LadderReport) []bool {
		var out []bool
		for _, r := range rep.Rows {
			out = append(out, r.IdenticalOutput)
		}
		return out
	}

	resident, err := run(t, func(c *LadderConfig) { c.ResidentReference = true })
	if err != nil {
		t.Fatal(err)
	}
	rec := resident.Reference
	if resident.ReferenceSource != ReferenceResident || rec == nil || len(rec.Tokens) != 6 || rec.Source != ReferenceResident {
		t.Fatalf("all-resident reference: source %q, reference %+v", resident.ReferenceSource, rec)
	}
	file := filepath.Join(dir, "ref.json")
	if err := rec.WriteFile(file); err != nil {
		t.Fatal(err)
	}
	read, err := ReadLadderReference(file)
	if err != nil || !slices.Equal(read.Tokens, rec.Tokens) || !slices.Equal(read.Prompt, rec.Prompt) || read.ModelSHA256 != rec.ModelSHA256 {
		t.Fatalf("round trip: %+v %v, want %+v", read, err, rec)
	}

	streamed, err := run(t, func(*LadderConfig) {})
	if err != nil {
		t.Fatal(err)
	}
	if streamed.ReferenceSource != ReferenceStreamed || streamed.Reference != nil || streamed.ResidentRSS != 0 || slices.Contains(identical(streamed), false) {
		t.Fatalf("streamed reference: source %q, resident RSS %d, identical %v", streamed.ReferenceSource, streamed.ResidentRSS, identical(streamed))
	}

	recorded, err := run(t, func(c *LadderConfig) { c.Reference = read })
	if err != nil {
		t.Fatal(err)
	}
	if recorded.ReferenceSource != ReferenceRecorded || recorded.ResidentRSS != 0 || slices.Contains(identical(recorded), false) {
		t.Fatalf("recorded reference: source %q, identical %v", recorded.ReferenceSource, identical(recorded))
	}

	wrong := *read
	wrong.Tokens = slices.Clone(read.Tokens)
	wrong.Tokens[len(wrong.Tokens)-1] = (wrong.Tokens[len(wrong.Tokens)-1] + 1) % 512
	bad, err := run(t, func(c *LadderConfig) { c.Reference = &wrong })
	if err != nil {
		t.Fatal(err)
	}
	if slices.Contains(identical(bad), true) {
		t.Fatalf("a corrupted reference left rungs identical: %v", identical(bad))
	}

	for _, tc := range []struct {
		name string
		edit func(*LadderReference)
		want string
	}{
		{"another model", func(r *LadderReference) { r.ModelSHA256 = strings.Repeat("ab", 32) }, "recorded on model sha256 abababababab"},
		{"other length", func(r *LadderReference) { r.Tokens = r.Tokens[:4] }, "has 4 generated tokens, the ladder generates 6"},
		{"old format", func(r *LadderReference) { r.Format = "v0" }, `format "v0"`},
		{"negative token", func(r *LadderReference) { r.Prompt = []int{-1} }, "negative token id"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := *read
			tc.edit(&r)
			if _, err := run(t, func(c *LadderConfig) { c.Reference = &r }); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want %q", err, tc.want)
			}
		})
	}
	if err := os.WriteFile(file, []byte(`{"format":`), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := ReadLadderReference(file); err == nil || !strings.Contains(err.Error(), "ref.json") {
		t.Fatalf("truncated reference file: %v", err)
	}
}
