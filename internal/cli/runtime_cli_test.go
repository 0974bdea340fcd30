package cli_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/lesfarm/lesfarm/runtime/gguf"
	"github.com/lesfarm/lesfarm/runtime/tensor"
)

// goldenQ4 is the golden Q4_K_M fixture owned by runtime/model.
const goldenQ4 = "../../runtime/model/testdata/tiny-qwen3moe-q4_k_m.gguf"

func TestGenerateJSONContract(t *testing.T) {
	code, out, errOut := run(t, "generate", "--model", goldenQ4, "--prompt", "The quick brown fox", "--max-tokens", "8", "--threads", "1", "--format", "json")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	var raw map[string]json.RawMessage
	if err := json.Unmarshal([]byte(out), &raw); err != nil {
		t.Fatalf("output is not one JSON object: %v\n%s", err, out)
	}
	want := []string{"prompt_token_ids", "token_ids", "text", "prefill_tokens_per_second", "decode_tokens_per_second", "ttft_ms"}
	keys := make([]string, 0, len(raw))
	for k := range raw {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	slices.Sort(want)
	if !slices.Equal(keys, want) {
		t.Fatalf("JSON fields %v, want exactly %v", keys, want)
	}
	var res struct {
		Prompt  []int   `json:"prompt_token_ids"`
		Tokens  []int   `json:"token_ids"`
		Text    string  `json:"text"`
		Prefill float64 `json:"prefill_tokens_per_second"`
		Decode  float64 `json:"decode_tokens_per_second"`
		TTFT    float64 `json:"ttft_ms"`
	}
	if err := json.Unmarshal([]byte(out), &res); err != nil {
		t.Fatal(err)
	}
	// llama.cpp's tokenization and greedy tokens (golden q4_k_m ref.json).
	if !slices.Equal(res.Prompt, []int{464, 2068, 1379, 675, 277, 1140}) {
		t.Errorf("prompt ids %v", res.Prompt)
	}
	if !slices.Equal(res.Tokens, []int{3292, 2685, 2499, 3370, 258, 1002, 944, 3791}) {
		t.Errorf("greedy ids %v", res.Tokens)
	}
	if res.Text == "" || res.Prefill <= 0 || res.Decode <= 0 || res.TTFT <= 0 {
		t.Errorf("empty text or non-positive timings: %+v", res)
	}
}

func TestGenerateTextAndSampling(t *testing.T) {
	code, out, errOut := run(t, "generate", "--model", goldenQ4, "--prompt", "Once upon a time", "--max-tokens", "5", "--threads", "1")
	if code != 0 || strings.TrimSpace(out) == "" || !strings.Contains(errOut, "decode") {
		t.Fatalf("exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	// Same seed, same tokens; sampling output is still valid JSON.
	args := []string{"generate", "--model", goldenQ4, "--prompt", "Once upon a time", "--max-tokens", "12", "--temperature", "1.5", "--top-k", "50", "--top-p", "0.95", "--seed", "7", "--format", "json", "--threads", "1"}
	_, a, _ := run(t, args...)
	_, b, _ := run(t, args...)
	var ra, rb struct {
		TokenIDs []int `json:"token_ids"`
	}
	json.Unmarshal([]byte(a), &ra)
	json.Unmarshal([]byte(b), &rb)
	if len(ra.TokenIDs) != 12 || !slices.Equal(ra.TokenIDs, rb.TokenIDs) {
		t.Fatalf("seeded sampling not reproducible: %v vs %v", ra.TokenIDs, rb.TokenIDs)
	}
}

// writeGGUF writes a small GGUF with the given metadata and one tensor.
func writeGGUF(t *testing.T, kv map[string]any, typ tensor.Type, dims []uint64) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "bad.gguf")
	f, err := os.Create(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	w := gguf.NewWriter(f)
	keys := make([]string, 0, len(kv))
	for k := range kv {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		if err := w.AddKV(k, kv[k]); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.AddTensor("token_embd.weight", typ, dims); err != nil {
		t.Fatal(err)
	}
	size, _ := gguf.TensorSize(typ, dims)
	if err := w.WriteHeader(); err != nil {
		t.Fatal(err)
	}
	if err := w.WriteTensor("token_embd.weight", make([]byte, size)); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestRuntimeCommandsBadInput(t *testing.T) {
	dir := t.TempDir()
	notGGUF := filepath.Join(dir, "notes.txt")
	os.WriteFile(notGGUF, []byte("this is not a model\n"), 0o644)
	unknownArch := writeGGUF(t, map[string]any{"general.architecture": "llama9"}, tensor.F32, []uint64{8, 8})
	qwen := map[string]any{
		"general.architecture": "qwen3", "qwen3.block_count": uint32(1), "qwen3.embedding_length": uint32(64),
		"qwen3.attention.head_count": uint32(2), "qwen3.feed_forward_length": uint32(64), "qwen3.context_length": uint32(64),
	}
	badType := writeGGUF(t, qwen, tensor.I32, []uint64{64, 300})
	small := filepath.Join(dir, "small.gguf")
	if code, _, e := run(t, "synth", "--quiet", "--layers", "1", "--experts", "4", "--experts-used", "2", "--hidden", "64", "--expert-ffn", "64",
		"--heads", "2", "--vocab", "300", "--context", "16", "--type", "F32", "-o", small); code != 0 {
		t.Fatalf("synth small: exit %d: %s", code, e)
	}
	long := strings.Repeat("lorem ipsum dolor sit amet ", 20)
	tests := []struct {
		name   string
		args   []string
		code   int
		stderr string
	}{
		{"generate no model", []string{"generate", "--prompt", "hi"}, 2, "--model is required"},
		{"generate missing file", []string{"generate", "--model", filepath.Join(dir, "nope.gguf"), "--prompt", "hi"}, 2, "does not exist: check the --model path"},
		{"generate directory", []string{"generate", "--model", dir, "--prompt", "hi"}, 2, "is a directory"},
		{"generate not gguf", []string{"generate", "--model", notGGUF, "--prompt", "hi"}, 2, "gguf"},
		{"generate unknown arch", []string{"generate", "--model", unknownArch, "--prompt", "hi"}, 2, `unknown architecture "llama9"`},
		{"generate unsupported type", []string{"generate", "--model", badType, "--prompt", "hi"}, 2, "has type I32, which has no kernel; re-quantize"},
		{"generate prompt too long", []string{"generate", "--model", small, "--prompt", long}, 2, "shorten --prompt"},
		{"generate no prompt", []string{"generate", "--model", small}, 2, "--prompt is required"},
		{"generate bad format", []string{"generate", "--model", small, "--prompt", "hi", "--format", "xml"}, 2, `--format "xml"`},
		{"generate zero tokens", []string{"generate", "--model", small, "--prompt", "hi", "--max-tokens", "0"}, 2, "--max-tokens 0"},
		{"generate negative temperature", []string{"generate", "--model", small, "--prompt", "hi", "--temperature", "-1"}, 2, "temperature"},
		{"generate bad flag value", []string{"generate", "--model", small, "--prompt", "hi", "--max-tokens", "many"}, 2, "invalid argument"},
		{"generate zero threads", []string{"generate", "--model", small, "--prompt", "hi", "--threads", "0"}, 2, "--threads 0"},
		{"synth no output", []string{"synth", "--quiet"}, 2, "-o PATH is required"},
		{"synth bad type", []string{"synth", "--quiet", "--type", "Q3_X", "-o", filepath.Join(dir, "x.gguf")}, 2, `--type "Q3_X"`},
		{"synth bad geometry", []string{"synth", "--quiet", "--experts", "4", "--experts-used", "8", "-o", filepath.Join(dir, "x.gguf")}, 2, "experts-used"},
		{"synth unknown arch", []string{"synth", "--quiet", "--arch", "mixtral", "-o", filepath.Join(dir, "x.gguf")}, 2, `unknown architecture "mixtral"`},
		{"synth unwritable dir", []string{"synth", "--quiet", "-o", filepath.Join(dir, "no", "such", "x.gguf")}, 2, "cannot write"},
		{"bench missing file", []string{"bench", "--model", filepath.Join(dir, "nope.gguf")}, 2, "does not exist"},
		{"bench no model", []string{"bench"}, 2, "--model is required"},
		{"bench bad format", []string{"bench", "--model", small, "--format", "xml"}, 2, `--format "xml"`},
		{"bench bad threads", []string{"bench", "--model", small, "--threads", "1,zero"}, 2, "--threads"},
		{"bench nothing", []string{"bench", "--model", small, "--prompt-tokens", "0", "--gen-tokens", "0"}, 2, "nothing to measure"},
		{"bench unknown arch", []string{"bench", "--model", unknownArch, "--copy-mb", "0"}, 2, "unknown architecture"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, _, errOut := run(t, tt.args...)
			if code != tt.code {
				t.Errorf("exit code = %d, want %d (stderr %q)", code, tt.code, errOut)
			}
			if !strings.Contains(errOut, tt.stderr) {
				t.Errorf("stderr %q lacks %q", errOut, tt.stderr)
			}
			if strings.Count(strings.TrimSpace(errOut), "\n") > 0 || strings.Contains(errOut, "goroutine ") {
				t.Errorf("error is not one line: %q", errOut)
			}
		})
	}
	if _, err := os.Stat(filepath.Join(dir, "x.gguf")); err == nil {
		t.Error("failed synth left an output file")
	}
}

func TestSynthThenGenerateAndBench(t *testing.T) {
	p := filepath.Join(t.TempDir(), "m.gguf")
	code, out, errOut := run(t, "synth", "--layers", "2", "--experts", "8", "--experts-used", "2", "--hidden", "256", "--expert-ffn", "256",
		"--heads", "4", "--kv-heads", "2", "--vocab", "1000", "--type", "Q4_K", "--seed", "5", "-o", p)
	if code != 0 || !strings.Contains(out, "wrote "+p) || !strings.Contains(errOut, "100%") {
		t.Fatalf("synth: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	code, out, errOut = run(t, "generate", "--model", p, "--prompt", "hello world", "--max-tokens", "4", "--format", "json", "--threads", "1")
	if code != 0 {
		t.Fatalf("generate on synth model: exit %d: %s", code, errOut)
	}
	var g struct {
		TokenIDs []int `json:"token_ids"`
	}
	if err := json.Unmarshal([]byte(out), &g); err != nil || len(g.TokenIDs) == 0 {
		t.Fatalf("generate output %q: %v", out, err)
	}
	for _, format := range []string{"md", "csv", "json", "jsonl"} {
		code, out, errOut = run(t, "bench", "--model", p, "--threads", "1", "--repetitions", "2", "--prompt-tokens", "8", "--gen-tokens", "4", "--copy-mb", "8", "--quiet", "--format", format)
		if code != 0 {
			t.Fatalf("bench %s: exit %d: %s", format, code, errOut)
		}
		switch format {
		case "md":
			if !strings.Contains(out, "| model |") || !strings.Contains(out, "| pp8 |") || !strings.Contains(out, "| tg4 |") {
				t.Errorf("md table:\n%s", out)
			}
		case "csv":
			if lines := strings.Split(strings.TrimSpace(out), "\n"); len(lines) != 3 || !strings.HasPrefix(lines[0], "model,") {
				t.Errorf("csv:\n%s", out)
			}
		case "json":
			var r struct {
				Rows []struct {
					Test string  `json:"test"`
					TPS  float64 `json:"tokens_per_second"`
					GBps float64 `json:"gb_per_second"`
				} `json:"rows"`
				Copy float64 `json:"memory_copy_gb_per_second"`
			}
			if err := json.Unmarshal([]byte(out), &r); err != nil || len(r.Rows) != 2 || r.Rows[1].TPS <= 0 || r.Rows[1].GBps <= 0 || r.Copy <= 0 {
				t.Errorf("json %v:\n%s", err, out)
			}
		case "jsonl":
			if lines := strings.Split(strings.TrimSpace(out), "\n"); len(lines) != 2 || !json.Valid([]byte(lines[0])) {
				t.Errorf("jsonl:\n%s", out)
			}
		}
	}
}
