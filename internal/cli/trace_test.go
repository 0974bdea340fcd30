package cli

import (
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// writeNPY writes a vLLM-style routed_experts .npy of shape (T, L, K) whose
// token t, layer l, slot k routes to expert (t/2 + l + k) mod experts: pairs
// of tokens share their experts.
func writeNPY(t *testing.T, path string, T, L, K, experts int) {
	t.Helper()
	h := fmt.Sprintf("{'descr': '<i2', 'fortran_order': False, 'shape': (%d, %d, %d), }\n", T, L, K)
	b := []byte("\x93NUMPY\x01\x00")
	b = binary.LittleEndian.AppendUint16(b, uint16(len(h)))
	b = append(b, h...)
	for tok := range T {
		for l := range L {
			for k := range K {
				b = binary.LittleEndian.AppendUint16(b, uint16((tok/2+l+k)%experts))
			}
		}
	}
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestTraceImportThenRoutingStats: an imported vLLM array and Megatron
// JSONL become traces that routing-stats reads; geometry against --model
// is checked.
func TestTraceImportThenRoutingStats(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	npy := filepath.Join(dir, "routed_experts.npy")
	writeNPY(t, npy, 16, 6, 4, 32)
	tr := filepath.Join(dir, "v.trace.gz")
	if code, _, errOut := runCLI("trace", "import", npy, "-o", tr); code != 0 {
		t.Fatalf("import: exit %d: %s", code, errOut)
	}
	code, out, errOut := runCLI("routing-stats", "--trace", tr)
	// The second token of a pair reuses all 4 experts, the first of the
	// next pair 3 (the window shifts by one): (8·1 + 7·0.75) / 15 = 0.883.
	if code != 0 || !strings.Contains(out, "16 tokens in 1 sequences") || !strings.Contains(out, "0.883") {
		t.Fatalf("routing-stats --trace: exit %d: %s%s", code, out, errOut)
	}
	jl := filepath.Join(dir, "router.jsonl")
	if err := os.WriteFile(jl, []byte(`{"step":0,"layer":0,"top_indices":[[1,2]]}`+"\n"+`{"step":0,"layer":1,"top_indices":[[3,4]]}`+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if code, _, errOut := runCLI("trace", "import", jl, "-o", filepath.Join(dir, "m.trace.gz")); code != 0 {
		t.Fatalf("import jsonl: exit %d: %s", code, errOut)
	}
	trained := lesFixture(t, "trained/tiny-moe-kjv-f16.gguf")
	if code, _, errOut := runCLI("trace", "import", npy, "--model", trained, "-o", filepath.Join(dir, "ok.trace.gz")); code != 0 {
		t.Fatalf("import --model: exit %d: %s", code, errOut)
	}
	bad := filepath.Join(dir, "five.npy")
	writeNPY(t, bad, 4, 5, 4, 32)
	code, _, errOut = runCLI("trace", "import", bad, "--model", trained, "-o", filepath.Join(dir, "bad.trace.gz"))
	if code != 2 || !strings.Contains(errOut, "five.npy: 5 MoE layers, the model has 6") {
		t.Fatalf("geometry mismatch: exit %d: %s", code, errOut)
	}
}

// TestTraceImportBadInput: one line naming the file and position, exit 2.
func TestTraceImportBadInput(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	npy := filepath.Join(dir, "r.npy")
	writeNPY(t, npy, 4, 2, 2, 8)
	b, _ := os.ReadFile(npy)
	short := filepath.Join(dir, "short.npy")
	if err := os.WriteFile(short, b[:len(b)-3], 0o644); err != nil {
		t.Fatal(err)
	}
	jl := filepath.Join(dir, "gap.jsonl")
	if err := os.WriteFile(jl, []byte(`{"step":0,"layer":0,"top_indices":[[1]]}`+"\n"+`{"step":0,"layer":2,"top_indices":[[1]]}`+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		args []string
		want string
	}{
		{"truncated npy", []string{short, "-o", filepath.Join(dir, "o")}, "short.npy: byte"},
		{"missing layer", []string{jl, "-o", filepath.Join(dir, "o")}, "gap.jsonl: line 1: step 0 has no layer 1"},
		{"unknown format", []string{npy, "--from", "tf", "-o", filepath.Join(dir, "o")}, "--from"},
		{"unknown extension", []string{filepath.Join(dir, "x.bin"), "-o", filepath.Join(dir, "o")}, "x.bin"},
		{"no output", []string{npy}, "-o OUT"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			code, _, errOut := runCLI(append([]string{"trace", "import"}, tt.args...)...)
			if code != 2 || !strings.Contains(errOut, tt.want) || strings.Count(strings.TrimSpace(errOut), "\n") > 0 {
				t.Fatalf("exit %d, stderr %q; want exit 2 and one line containing %q", code, errOut, tt.want)
			}
		})
	}
}
