package cli

import (
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/lesfarm/lesfarm/internal/fixture"
)

func TestPerplexityCLI(t *testing.T) {
	model := fixture.Shared(t, "trained/tiny-moe-kjv-f16.gguf", "")
	text := fixture.Shared(t, "trained/validation.txt", "")
	dir := t.TempDir()
	empty := filepath.Join(dir, "empty.txt")
	short := filepath.Join(dir, "short.txt")
	os.WriteFile(empty, nil, 0o644)
	os.WriteFile(short, []byte("In the beginning"), 0o644)
	for _, tc := range []struct {
		name string
		args []string
		code int
		want string
	}{
		{"no file", []string{"perplexity", "--model", model}, 2, "--file is required"},
		{"missing file", []string{"perplexity", "--model", model, "--file", filepath.Join(dir, "nope")}, 2, "does not exist"},
		{"empty file", []string{"perplexity", "--model", model, "--file", empty}, 2, "is empty"},
		{"short file", []string{"perplexity", "--model", model, "--file", short}, 2, "needs at least 512 tokens"},
		{"bad method", []string{"perplexity", "--model", model, "--file", text, "--method", "x"}, 2, "use llama.cpp or windows"},
		{"ctx too big", []string{"perplexity", "--model", model, "--file", text, "--ctx", "1024"}, 2, "exceeds the model's context length 256"},
		{"text", []string{"perplexity", "--model", model, "--file", text, "--chunks", "2"}, 0, "method llama.cpp: 2 windows, context 256, stride 256, scoring window positions 128..254"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, out, errOut := runCLI(tc.args...)
			if code != tc.code || !strings.Contains(out+errOut, tc.want) {
				t.Fatalf("exit %d, want %d; output %q, want %q", code, tc.code, out+errOut, tc.want)
			}
			if code != 0 && strings.Count(strings.TrimSpace(errOut), "\n") > 0 {
				t.Fatalf("error is not one line: %q", errOut)
			}
		})
	}
	code, out, errOut := runCLI("perplexity", "--model", model, "--file", text, "--method", "windows", "--ctx", "256", "--format", "json", "--threads", "2")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	var res struct {
		PPL          float64 `json:"ppl"`
		Context      int     `json:"context"`
		Stride       int     `json:"stride"`
		First        *int    `json:"score_first"`
		Last         int     `json:"score_last"`
		TokensScored int     `json:"tokens_scored"`
	}
	if err := json.Unmarshal([]byte(out), &res); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	// ref.json: llama.cpp 34.4059 over 1792 tokens.
	if math.Abs(res.PPL-34.4059)/34.4059 > 0.01 || res.TokensScored != 1792 || res.Context != 256 || res.Stride != 256 || res.First == nil || *res.First != 0 || res.Last != 255 {
		t.Fatalf("got %+v, want ppl 34.41 over 1792 tokens, context/stride 256, positions 0..255", res)
	}
}
