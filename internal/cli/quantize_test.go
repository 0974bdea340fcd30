package cli_test

import (
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/lesfarm/lesfarm/runtime/model"
	"github.com/lesfarm/lesfarm/runtime/tensor"
)

// synthModel writes a small random F16 qwen3moe whose 256-value rows take
// every K-quant without fallback.
func synthModel(t *testing.T, dir string) string {
	t.Helper()
	p := filepath.Join(dir, "synth-f16.gguf")
	f, err := os.Create(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := model.WriteSynthetic(f, model.SynthConfig{Layers: 2, Experts: 8, ExpertsUsed: 2, Hidden: 256, ExpertFFN: 256, Heads: 4, KVHeads: 2, Vocab: 512, Context: 128, Type: tensor.F16, Seed: 11}); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestQuantizeGenerateEveryMode: a file written by lesfarm quantize, with
// and without --pack, loads in every mode of lesfarm generate, and the
// greedy output is the same in all of them.
func TestQuantizeGenerateEveryMode(t *testing.T) {
	dir := t.TempDir()
	in := synthModel(t, dir)
	for _, typ := range []string{"Q2_K", "Q4_K"} {
		for _, packed := range []bool{false, true} {
			out := filepath.Join(dir, typ+".gguf")
			args := []string{"quantize", in, "-o", out, "--type", typ, "--quiet", "--threads", "1"}
			if packed {
				out = filepath.Join(dir, typ+".packed.gguf")
				args = []string{"quantize", in, "-o", out, "--type", typ, "--pack", "--quiet", "--threads", "1"}
			}
			code, stdout, errOut := run(t, args...)
			if code != 0 || !strings.Contains(stdout, "wrote "+out) {
				t.Fatalf("quantize %s: exit %d: %s%s", typ, code, stdout, errOut)
			}
			want := tokenIDs(t, generateJSONOut(t, "--model", out))
			if len(want) != 8 {
				t.Fatalf("%s: resident run gave %d tokens", out, len(want))
			}
			for _, mode := range []string{"on-demand", "on-demand-parallel", "lookahead", "scheduled"} {
				got := tokenIDs(t, generateJSONOut(t, "--model", out, "--mode", mode, "--expert-budget", "25%"))
				if !slices.Equal(got, want) {
					t.Fatalf("%s --mode %s: tokens %v, resident %v", out, mode, got, want)
				}
			}
		}
	}
}

// TestQuantizeCLIErrors: bad input gets one line naming the fix.
func TestQuantizeCLIErrors(t *testing.T) {
	dir := t.TempDir()
	in := synthModel(t, dir)
	q := filepath.Join(dir, "q8.gguf")
	if code, _, errOut := run(t, "quantize", in, "-o", q, "--type", "Q8_0", "--quiet"); code != 0 {
		t.Fatal(errOut)
	}
	calib := filepath.Join(dir, "calib.txt")
	os.WriteFile(calib, []byte(strings.Repeat("In the beginning God created the heaven and the earth. ", 40)), 0o644)
	empty := filepath.Join(dir, "empty.txt")
	os.WriteFile(empty, []byte("\n  \n"), 0o644)
	out := filepath.Join(dir, "out.gguf")
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"no output", []string{"quantize", in, "--type", "Q4_K"}, "-o OUT is required"},
		{"no type", []string{"quantize", in, "-o", out}, "give --type T"},
		{"bad type", []string{"quantize", in, "-o", out, "--type", "Q4_0"}, "use one of Q8_0, Q6_K, Q5_K, Q4_K, Q3_K, Q2_K"},
		{"same path", []string{"quantize", in, "-o", in, "--type", "Q4_K"}, "is the input model"},
		{"missing input", []string{"quantize", filepath.Join(dir, "nope.gguf"), "-o", out, "--type", "Q4_K"}, "does not exist"},
		{"missing out dir", []string{"quantize", in, "-o", filepath.Join(dir, "no", "x.gguf"), "--type", "Q4_K"}, "output directory"},
		{"quantized input", []string{"quantize", q, "-o", out, "--type", "Q4_K", "--quiet"}, "is already Q8_0"},
		{"type and budget", []string{"quantize", in, "-o", out, "--type", "Q4_K", "--budget", "0.3", "--calib", calib}, "exclude each other"},
		{"calib without budget", []string{"quantize", in, "-o", out, "--calib", calib}, "--calib needs --budget"},
		{"budget without calib", []string{"quantize", in, "-o", out, "--budget", "0.3"}, "--budget needs --calib FILE"},
		{"missing calib", []string{"quantize", in, "-o", out, "--budget", "0.3", "--calib", filepath.Join(dir, "nope.txt")}, "calibration file"},
		{"empty calib", []string{"quantize", in, "-o", out, "--budget", "0.3", "--calib", empty}, "is empty"},
		{"budget too small", []string{"quantize", in, "-o", out, "--budget", "0.05", "--calib", calib}, "below the smallest possible model"},
		{"bad budget", []string{"quantize", in, "-o", out, "--budget", "lots", "--calib", calib}, "--budget"},
		{"planner on quantized input", []string{"quantize", q, "-o", out, "--budget", "0.9", "--calib", calib}, "already Q8_0"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, stdout, errOut := run(t, tc.args...)
			if code != 2 || !strings.Contains(errOut, tc.want) || strings.Count(strings.TrimSpace(errOut), "\n") != 0 {
				t.Fatalf("exit %d, stderr %q (stdout %q), want exit 2 and one line with %q", code, errOut, stdout, tc.want)
			}
			if _, err := os.Stat(out); err == nil {
				t.Fatal("output written despite the error")
			}
		})
	}
}

// TestQuantizePlannerCLI plans the synthetic model at 40% of its size and
// prints the plan table and JSON.
func TestQuantizePlannerCLI(t *testing.T) {
	dir := t.TempDir()
	in := synthModel(t, dir)
	calib := filepath.Join(dir, "calib.txt")
	os.WriteFile(calib, []byte(strings.Repeat("In the beginning God created the heaven and the earth. And the earth was without form, and void. ", 12)), 0o644)
	out := filepath.Join(dir, "mixed.gguf")
	code, stdout, errOut := run(t, "quantize", in, "-o", out, "--budget", "40%", "--calib", calib, "--calib-tokens", "128", "--types", "Q8_0,Q4_K,Q2_K", "--quiet", "--format", "json")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	var res struct {
		Size  int64  `json:"size_bytes"`
		Input int64  `json:"input_bytes"`
		Type  string `json:"type"`
		Plan  struct {
			Budget int64  `json:"budget_bytes"`
			Method string `json:"method"`
			Parts  []struct {
				Layer       int     `json:"layer"`
				Part        string  `json:"part"`
				Type        string  `json:"type"`
				Bytes       int64   `json:"bytes"`
				Sensitivity float64 `json:"sensitivity"`
			} `json:"parts"`
		} `json:"plan"`
	}
	if err := json.Unmarshal([]byte(stdout), &res); err != nil {
		t.Fatalf("%v\n%s", err, stdout)
	}
	if res.Type != "mixed" || res.Size > res.Plan.Budget || res.Plan.Budget != int64(math.Round(0.4*float64(res.Input))) || len(res.Plan.Parts) != 6 || !strings.Contains(res.Plan.Method, "knapsack") {
		t.Fatalf("plan %+v", res)
	}
	code, stdout, errOut = run(t, "quantize", in, "-o", out, "--budget", "40%", "--calib", calib, "--calib-tokens", "128", "--types", "Q8_0,Q4_K,Q2_K", "--quiet")
	if code != 0 || !strings.Contains(stdout, "| layer | part | type | bytes | sensitivity (KL, nats/token) |") || !strings.Contains(stdout, "| 1 | experts |") {
		t.Fatalf("exit %d: %s%s", code, stdout, errOut)
	}
}

// TestLadderMixedFlags: the +mixed-precision flags are checked before the
// ladder runs.
func TestLadderMixedFlags(t *testing.T) {
	dir := t.TempDir()
	in := synthModel(t, dir)
	base := []string{"bench", "--model", in, "--ladder", "--profile", "phone-flagship", "--expert-budget", "0.25", "--threads", "1", "--quiet"}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--mixed-experts", in}, "add --mixed PATH"},
		{[]string{"--perplexity-file", in}, "add --mixed PATH"},
		{[]string{"--mixed", filepath.Join(dir, "nope.gguf")}, "check the path"},
		{[]string{"--mixed", in}, "is the reference --model"},
		{[]string{"--mixed", in + ".x", "--replay-compute", "10ms"}, "check the path"},
	} {
		code, _, errOut := run(t, append(base, tc.args...)...)
		if code != 2 || !strings.Contains(errOut, tc.want) {
			t.Errorf("%v: exit %d, %q; want exit 2 and %q", tc.args, code, errOut, tc.want)
		}
	}
}

// TestQuantizeAllowRequantize: an already quantized model is refused with
// the flag named, and with --allow-requantize it is quantized again,
// uniformly and under a planner's budget below its size.
func TestQuantizeAllowRequantize(t *testing.T) {
	dir := t.TempDir()
	q := filepath.Join(dir, "q8.gguf")
	if code, _, errOut := run(t, "quantize", synthModel(t, dir), "-o", q, "--type", "Q8_0", "--quiet"); code != 0 {
		t.Fatal(errOut)
	}
	st, err := os.Stat(q)
	if err != nil {
		t.Fatal(err)
	}
	calib := filepath.Join(dir, "calib.txt")
	os.WriteFile(calib, []byte(strings.Repeat("In the beginning God created the heaven and the earth. And the earth was without form, and void. ", 12)), 0o644)
	out := filepath.Join(dir, "out.gguf")
	if code, _, errOut := run(t, "quantize", q, "-o", out, "--type", "Q4_K", "--quiet"); code != 2 || !strings.Contains(errOut, "--allow-requantize") {
		t.Fatalf("without the flag: exit %d, %s", code, errOut)
	}
	for _, args := range [][]string{
		{"--type", "Q4_K"},
		{"--budget", "60%", "--calib", calib, "--calib-tokens", "64", "--types", "Q4_K,Q2_K"},
	} {
		code, stdout, errOut := run(t, append([]string{"quantize", q, "-o", out, "--allow-requantize", "--quiet"}, args...)...)
		if code != 0 {
			t.Fatalf("%v: exit %d: %s", args, code, errOut)
		}
		got, err := os.Stat(out)
		if err != nil || got.Size() > st.Size()*6/10 {
			t.Fatalf("%v: %v, %d bytes from %d\n%s", args, err, got.Size(), st.Size(), stdout)
		}
	}
}
