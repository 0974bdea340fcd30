package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"math"
	"os"
	"runtime"
	"strings"
	"testing"
)

// TestRunResident benchmarks the owned golden Q4_K_M fixture briefly and
// checks the derived figures are consistent with each other.
func TestRunResident(t *testing.T) {
	rep, err := Run(context.Background(), Config{
		Model: "../model/testdata/tiny-qwen3moe-q4_k_m.gguf", Threads: []int{1},
		Repetitions: 2, PromptTokens: 8, GenTokens: 4, CopyBytes: 4 << 20,
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Rows) != 2 || rep.Rows[0].Test != "pp8" || rep.Rows[1].Test != "tg4" {
		t.Fatalf("rows %+v", rep.Rows)
	}
	tg := rep.Rows[1]
	// Decode reads every non-expert matrix plus top-4 experts in 4 layers
	// per token: about 1.1 MB for this model (token_embd row excluded).
	if tg.WeightGB < 0.5e-3 || tg.WeightGB > 3e-3 {
		t.Errorf("decode weight bytes per token %.4g GB, want about 1e-3", tg.WeightGB)
	}
	if math.Abs(tg.GBps-tg.WeightGB*tg.TPS) > 1e-9 || tg.CPUTPS <= 0 || len(tg.Samples) != 2 || rep.CopyGBps <= 0 {
		t.Errorf("inconsistent row %+v", tg)
	}
	for _, f := range Formats {
		var b bytes.Buffer
		if err := rep.Write(&b, f); err != nil {
			t.Fatal(err)
		}
		if f == "json" && !json.Valid(b.Bytes()) || f == "md" && !strings.Contains(b.String(), "| tg4 |") {
			t.Errorf("%s output:\n%s", f, b.String())
		}
	}
	if err := rep.Write(&bytes.Buffer{}, "xml"); err == nil {
		t.Error("unknown format accepted")
	}
}

func TestConfigErrors(t *testing.T) {
	for _, c := range []Config{{}, {Model: "x", Threads: []int{0}}, {Model: "x", PromptTokens: -1}} {
		if _, err := Run(context.Background(), c); err == nil {
			t.Errorf("Run(%+v) accepted a bad config", c)
		}
	}
}

// TestRunRejectsBadModelBeforeCopyBuffers: a file that is not a loadable
// model fails before the memory copy benchmark allocates its buffers
// (2 × CopyBytes: 1 GiB at bench's default), so a typo in --model costs
// neither the memory nor the seconds of filling them.
func TestRunRejectsBadModelBeforeCopyBuffers(t *testing.T) {
	dir := t.TempDir()
	for name, body := range map[string]string{
		"not-gguf.gguf":  "this is not a GGUF file at all",
		"truncated.gguf": "GGUF\x03\x00\x00\x00\x05",
	} {
		path := dir + "/" + name
		if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		_, err := Run(context.Background(), Config{Model: path, Threads: []int{1}, Repetitions: 1, GenTokens: 1, CopyBytes: 512 << 20})
		runtime.ReadMemStats(&after)
		if err == nil {
			t.Fatalf("%s: no error", name)
		}
		if alloc := after.TotalAlloc - before.TotalAlloc; alloc > 16<<20 {
			t.Errorf("%s: %d MiB allocated before the error %v; want the model checked before the copy buffers", name, alloc>>20, err)
		}
	}
}
