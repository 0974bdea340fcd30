package bench

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/lesfarm/lesfarm/profile"
	"github.com/lesfarm/lesfarm/runtime/expert"
	"github.com/lesfarm/lesfarm/runtime/model"
	"github.com/lesfarm/lesfarm/runtime/tensor"
	"github.com/lesfarm/lesfarm/runtime/units"
)

// TestLadderOneAtATime: measured one rung at a time, the ladder has every
// row (the oracle and +speculative included), each with its repetitions
// and the reference's tokens, as side by side.
func TestLadderOneAtATime(t *testing.T) {
	path := filepath.Join(t.TempDir(), "m.gguf")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := model.WriteSynthetic(f, model.SynthConfig{Layers: 2, Experts: 8, ExpertsUsed: 2, Hidden: 128, ExpertFFN: 128, Heads: 4, KVHeads: 2, Vocab: 512, Context: 64, Type: tensor.Q8_0, Seed: 9}); err != nil {
		t.Fatal(err)
	}
	f.Close()
	prof, err := profile.Load("phone-flagship")
	if err != nil {
		t.Fatal(err)
	}
	var lines []string
	for _, alone := range []bool{false, true} {
		rep, err := RunLadder(context.Background(), LadderConfig{Model: path, Profile: prof, Budget: units.Budget{Fraction: 0.25}, Repetitions: 2, Warmup: 1,
			PromptTokens: 4, GenTokens: 6, Modes: []expert.Mode{expert.OnDemand, expert.Scheduled}, OneAtATime: alone,
			Progress: func(l string) { lines = append(lines, l) }})
		if err != nil {
			t.Fatal(err)
		}
		if len(rep.Rows) != 3 || rep.Rows[2].Mode != SpeculativeRow || rep.Oracle == nil || !rep.Oracle.IdenticalOutput || rep.Oracle.Repetitions != 2 {
			t.Fatalf("one at a time %v: rows %+v oracle %+v", alone, rep.Rows, rep.Oracle)
		}
		for _, r := range rep.Rows {
			if !r.IdenticalOutput || r.Repetitions != 2 || r.DecodeTokensPerSecond <= 0 || r.BytesReadPerToken <= 0 {
				t.Fatalf("one at a time %v: row %+v", alone, r)
			}
		}
	}
	if want := "scheduled          repetition 2/2 done"; !contains(lines, want) {
		t.Fatalf("no per-rung progress %q in %q", want, lines)
	}
}

func contains(lines []string, s string) bool {
	for _, l := range lines {
		if l == s {
			return true
		}
	}
	return false
}
