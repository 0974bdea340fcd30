package cli_test

import (
	"encoding/json"
	"github.com/lesfarm/lesfarm/internal/fixture"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/lesfarm/lesfarm/runtime/model"
	"github.com/lesfarm/lesfarm/runtime/tensor"
)

type specOut struct {
	Draft               string  `json:"draft"`
	K                   int     `json:"k"`
	Rounds              int     `json:"rounds"`
	Drafted             int     `json:"drafted"`
	Accepted            int     `json:"accepted"`
	AcceptanceRate      float64 `json:"acceptance_rate"`
	TokensPerTargetPass float64 `json:"tokens_per_target_pass"`
	AcceptedHistogram   []int   `json:"accepted_histogram"`
	DraftMS             float64 `json:"draft_ms"`
	TargetMS            float64 `json:"target_ms"`
}

func specOf(t *testing.T, raw map[string]json.RawMessage) specOut {
	t.Helper()
	var s specOut
	if err := json.Unmarshal(raw["speculative"], &s); err != nil {
		t.Fatalf("speculative object: %v (%s)", err, raw["speculative"])
	}
	return s
}

// TestGenerateDraftSelf drafts the golden model with itself: the tokens
// are plain greedy's, every draft is accepted, and the JSON keeps the
// issue-3 keys (plus the LES ones when streaming) and adds "speculative".
func TestGenerateDraftSelf(t *testing.T) {
	want := tokenIDs(t, generateJSONOut(t, "--model", goldenQ4))
	for _, tc := range []struct {
		name string
		args []string
		keys int
	}{
		{"resident-k4", []string{"--draft", goldenQ4}, 7},
		{"resident-k2", []string{"--draft", goldenQ4, "--draft-k", "2"}, 7},
		{"scheduled-k4", []string{"--draft", goldenQ4, "--mode", "scheduled", "--expert-budget", "25%"}, 16},
		{"resident-auto", []string{"--draft", goldenQ4, "--draft-k", "auto"}, 7},
	} {
		t.Run(tc.name, func(t *testing.T) {
			raw := generateJSONOut(t, append([]string{"--model", goldenQ4}, tc.args...)...)
			if got := tokenIDs(t, raw); !slices.Equal(got, want) {
				t.Fatalf("tokens %v, plain greedy %v", got, want)
			}
			if len(raw) != tc.keys {
				t.Fatalf("JSON has %d keys, want %d", len(raw), tc.keys)
			}
			s := specOf(t, raw)
			if s.Draft != goldenQ4 || s.Rounds == 0 || s.Drafted == 0 || s.Accepted != s.Drafted || s.AcceptanceRate != 1 ||
				s.TokensPerTargetPass <= 1 || len(s.AcceptedHistogram) != s.K+1 || s.TargetMS <= 0 || s.DraftMS <= 0 {
				t.Fatalf("speculative %+v", s)
			}
		})
	}
	// Text output is the plain text output.
	base := []string{"generate", "--model", goldenQ4, "--prompt", "The quick brown fox", "--max-tokens", "8", "--threads", "1"}
	_, plain, _ := run(t, base...)
	code, out, errOut := run(t, append(base, "--draft", goldenQ4, "--draft-k", "3")...)
	if code != 0 || out != plain || !strings.Contains(errOut, "speculative: draft") {
		t.Fatalf("exit %d, text %q (plain %q), stderr %s", code, out, plain, errOut)
	}
}

func TestGenerateDraftUsage(t *testing.T) {
	// A synthetic draft with another vocabulary.
	other := filepath.Join(t.TempDir(), "other.gguf")
	f, err := os.Create(other)
	if err != nil {
		t.Fatal(err)
	}
	c := model.SynthConfig{Arch: "qwen3", Layers: 1, Hidden: 32, ExpertFFN: 64, Heads: 2, Vocab: 300, Context: 64, Type: tensor.F32}
	if err := model.WriteSynthetic(f, c); err != nil {
		t.Fatal(err)
	}
	f.Close()
	base := []string{"generate", "--model", goldenQ4, "--prompt", "The quick brown fox", "--max-tokens", "4", "--threads", "1"}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--draft-k", "2"}, "--draft-k applies to speculative decoding"},
		{[]string{"--draft", goldenQ4, "--draft-k", "0"}, "--draft-k \"0\" must be auto or in"},
		{[]string{"--draft", "ngram", "--draft-k", "many"}, "--draft-k \"many\" must be auto or in"},
		{[]string{"--draft", other}, "vocabularies differ"},
		{[]string{"--draft", filepath.Join(t.TempDir(), "missing.gguf")}, "does not exist"},
	} {
		code, _, errOut := run(t, append(base, tc.args...)...)
		if code != 2 || !strings.Contains(errOut, tc.want) || strings.Count(strings.TrimSpace(errOut), "\n") != 0 {
			t.Errorf("%v: exit %d, stderr %q; want exit 2 and one line with %q", tc.args, code, errOut, tc.want)
		}
	}
}

// TestGenerateDraftTrained runs the trained MoE with its trained draft.
func TestGenerateDraftTrained(t *testing.T) {
	dir := filepath.Join(fixture.SharedDir(), "trained")
	moe, draft := filepath.Join(dir, "tiny-moe-kjv-f16.gguf"), filepath.Join(dir, "tiny-draft-kjv-f32.gguf")
	if _, err := os.Stat(draft); err != nil {
		fixture.Missing(t, draft, err, "generate --draft on the trained pair")
	}
	args := []string{"--model", moe, "--prompt", "And the LORD spake unto Moses, saying,", "--max-tokens", "32"}
	want := tokenIDs(t, generateJSONOut(t, args...))
	for _, extra := range [][]string{{"--draft", draft}, {"--draft", draft, "--mode", "scheduled", "--expert-budget", "25%", "--draft-k", "8"}} {
		raw := generateJSONOut(t, append(args, extra...)...)
		if got := tokenIDs(t, raw); !slices.Equal(got, want) {
			t.Fatalf("%v: tokens %v, plain greedy %v", extra, got, want)
		}
		if s := specOf(t, raw); s.Accepted == 0 || s.Accepted == s.Drafted {
			t.Fatalf("%v: a trained draft should be partly accepted: %+v", extra, s)
		}
	}
}

// TestGenerateDraftMTP: --draft mtp drafts with a qwen35moe model's own
// MTP block, resident and streamed: plain greedy's tokens, a
// "speculative" object naming mtp; a model without the block is refused.
func TestGenerateDraftMTP(t *testing.T) {
	p := filepath.Join(t.TempDir(), "q35.gguf")
	f, err := os.Create(p)
	if err != nil {
		t.Fatal(err)
	}
	c := model.SynthConfig{Arch: "qwen35moe", Layers: 4, Experts: 8, ExpertsUsed: 2, Hidden: 64, ExpertFFN: 64,
		Heads: 2, KVHeads: 1, HeadDim: 32, Vocab: 300, Context: 128, Type: tensor.F32, Seed: 3}
	if err := model.WriteSynthetic(f, c); err != nil {
		t.Fatal(err)
	}
	f.Close()
	base := []string{"--model", p, "--prompt", "hello there", "--max-tokens", "12"}
	want := tokenIDs(t, generateJSONOut(t, base...))
	for _, extra := range [][]string{{"--draft", "mtp"}, {"--draft", "mtp", "--draft-k", "2", "--mode", "scheduled", "--expert-budget", "25%"}} {
		raw := generateJSONOut(t, append(slices.Clone(base), extra...)...)
		if got := tokenIDs(t, raw); !slices.Equal(got, want) {
			t.Fatalf("%v: tokens %v, plain greedy %v", extra, got, want)
		}
		if s := specOf(t, raw); s.Draft != "mtp" || s.Rounds == 0 || s.Drafted == 0 {
			t.Fatalf("%v: speculative %+v", extra, s)
		}
	}
	code, _, errOut := run(t, "generate", "--model", goldenQ4, "--prompt", "hi", "--max-tokens", "2", "--draft", "mtp")
	if code == 0 || !strings.Contains(errOut, "no MTP/NextN block") {
		t.Fatalf("exit %d, stderr %s", code, errOut)
	}
}

// TestGenerateDraftNGram: the n-gram drafter (no draft file) keeps plain
// greedy's tokens, with fixed and adaptive k, and samples with a
// temperature; a draft of a third architecture is refused in one line.
func TestGenerateDraftNGram(t *testing.T) {
	want := tokenIDs(t, generateJSONOut(t, "--model", goldenQ4, "--max-tokens", "24"))
	for _, k := range []string{"3", "auto"} {
		raw := generateJSONOut(t, "--model", goldenQ4, "--max-tokens", "24", "--draft", "ngram", "--draft-k", k)
		if got := tokenIDs(t, raw); !slices.Equal(got, want) {
			t.Fatalf("k=%s: tokens %v, plain greedy %v", k, got, want)
		}
		if s := specOf(t, raw); s.Draft != "ngram" || s.Rounds == 0 {
			t.Fatalf("k=%s: speculative %+v", k, s)
		}
	}
	raw := generateJSONOut(t, "--model", goldenQ4, "--max-tokens", "24", "--draft", "ngram", "--temperature", "0.8", "--seed", "3")
	if got := tokenIDs(t, raw); len(got) != 24 {
		t.Fatalf("sampled: %d tokens", len(got))
	}
	q35 := filepath.Join(fixture.SharedDir(), "qwen35moe", "tiny-qwen35moe-q4_k_m.gguf")
	if _, err := os.Stat(q35); err != nil {
		fixture.Missing(t, q35, err, "generate --draft with a draft of another architecture")
	}
	code, _, errOut := run(t, "generate", "--model", goldenQ4, "--prompt", "a", "--draft", q35)
	if code != 2 || !strings.Contains(errOut, "must be a dense qwen3 model") || strings.Count(strings.TrimSpace(errOut), "\n") != 0 {
		t.Fatalf("qwen35moe draft: exit %d, stderr %q", code, errOut)
	}
}
