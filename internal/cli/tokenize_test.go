package cli_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// qwen2Vocab is the vocab-only copy of the golden fixture's tokenizer,
// owned by runtime/tokenizer.
const qwen2Vocab = "../../runtime/tokenizer/testdata/qwen2-vocab.gguf"

func TestTokenizeCommand(t *testing.T) {
	tests := []struct {
		name string
		args []string
		ids  []int
	}{
		// Reference ids from llama.cpp (golden ref.json).
		{"plain", []string{"--text", "The quick brown fox"}, []int{464, 2068, 1379, 675, 277, 1140}},
		{"control as text", []string{"--text", "<|im_end|>"}, nil},
		{"special", []string{"--special", "--text", "<|im_end|>"}, []int{4095}},
		{"empty", []string{"--text", ""}, []int{}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			code, out, errOut := run(t, append([]string{"tokenize", "--model", qwen2Vocab}, tc.args...)...)
			if code != 0 {
				t.Fatalf("exit %d: %s", code, errOut)
			}
			var res struct {
				IDs []int `json:"token_ids"`
			}
			if err := json.Unmarshal([]byte(out), &res); err != nil || !strings.HasPrefix(out, `{"token_ids":[`) {
				t.Fatalf("output %q is not {\"token_ids\":[...]}: %v", out, err)
			}
			if tc.ids != nil && !reflect.DeepEqual(res.IDs, tc.ids) {
				t.Errorf("ids %v, want %v", res.IDs, tc.ids)
			}
			if tc.name == "control as text" && (len(res.IDs) < 2 || res.IDs[0] >= 4093) {
				t.Errorf("control token parsed without --special: %v", res.IDs)
			}
		})
	}
	code, out, _ := run(t, "tokenize", "--model", qwen2Vocab, "--pieces", "--text", "a b")
	if code != 0 || out != "{\"token_ids\":[64,275],\"pieces\":[\"a\",\" b\"]}\n" {
		t.Errorf("--pieces: exit %d, %q", code, out)
	}
}

func TestTokenizeBadInput(t *testing.T) {
	dir := t.TempDir()
	junk := filepath.Join(dir, "junk.gguf")
	os.WriteFile(junk, []byte("definitely not a model"), 0o644)
	missing := filepath.Join(dir, "missing.gguf")
	tests := []struct {
		args []string
		want string
	}{
		{[]string{"--text", "x"}, "--model is required"},
		{[]string{"--model", qwen2Vocab}, "--text is required"},
		{[]string{"--model", missing, "--text", "x"}, "model file " + missing + " does not exist"},
		{[]string{"--model", dir, "--text", "x"}, "is a directory"},
		{[]string{"--model", junk, "--text", "x"}, junk + ": not a GGUF file"},
		{[]string{"--model", qwen2Vocab, "--text", "x", "--bogus"}, "unknown flag"},
	}
	for _, tc := range tests {
		code, out, errOut := run(t, append([]string{"tokenize"}, tc.args...)...)
		if code != 2 || out != "" || !strings.Contains(errOut, tc.want) || strings.Count(errOut, "\n") != 1 {
			t.Errorf("tokenize %v: exit %d, stderr %q; want exit 2 and one line containing %q", tc.args, code, errOut, tc.want)
		}
	}
}
