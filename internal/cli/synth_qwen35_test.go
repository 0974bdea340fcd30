package cli_test

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/lesfarm/lesfarm/runtime/gguf"
)

// TestSynthQwen35Preset writes the scaled 35B-A3B preset with flags that
// shrink it (flags override the preset) and checks the preset's other
// dimensions reach the file.
func TestSynthQwen35Preset(t *testing.T) {
	out := filepath.Join(t.TempDir(), "q35.gguf")
	code, stdout, stderr := run(t, "synth", "--quiet", "--preset", "qwen35moe-35b-a3b-scaled", "--layers", "2", "--full-attn-interval", "2",
		"--experts", "2", "--experts-used", "2", "--vocab", "512", "--type", "Q4_K", "-o", out)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	if !strings.Contains(stdout, "qwen35moe, 2 layers (+1 MTP), full attention every 2") {
		t.Errorf("stdout %q does not describe the model", stdout)
	}
	f, err := gguf.Open(out)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for key, want := range map[string]uint64{
		"qwen35moe.block_count": 3, "qwen35moe.expert_count": 2, "qwen35moe.expert_used_count": 2,
		"qwen35moe.embedding_length": 2048, "qwen35moe.expert_feed_forward_length": 512,
		"qwen35moe.ssm.group_count": 16, "qwen35moe.ssm.time_step_rank": 32, "qwen35moe.ssm.state_size": 128,
		"qwen35moe.attention.key_length": 256, "qwen35moe.nextn_predict_layers": 1,
	} {
		if got, err := f.Uint(key); err != nil || got != want {
			t.Errorf("%s = %d (%v), want %d", key, got, err, want)
		}
	}
	if _, ok := f.Tensor("blk.1.attn_q.weight"); !ok {
		t.Error("layer 1 is not full attention")
	}
	if _, ok := f.Tensor("blk.2.nextn.eh_proj.weight"); !ok {
		t.Error("no MTP block")
	}

	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--preset", "qwen36"}, `--preset "qwen36" is unknown`},
		{[]string{"--arch", "qwen35moe", "--ssm-groups", "3", "--ssm-heads", "4"}, "multiple of k-heads"},
		{[]string{"--arch", "qwen35moe", "--rope-dim", "200"}, "rope dims"},
		{[]string{"--arch", "qwen35moe", "--mtp", "99"}, "MTP layers"},
		{[]string{"--routing", "realistic"}, `routing preset "realistic" is unknown (have uniform, fine-grained-moe)`},
		{[]string{"--arch", "qwen3", "--routing", "fine-grained-moe"}, "needs a MoE architecture"},
		{[]string{"--arch", "qwen35moe", "--full-attn-interval", "1", "--routing", "fine-grained-moe"}, "layer 0 to be Gated DeltaNet"},
	} {
		args := append([]string{"synth", "--quiet", "-o", filepath.Join(t.TempDir(), "x.gguf")}, tc.args...)
		code, _, stderr := run(t, args...)
		if code != 2 || !strings.Contains(stderr, tc.want) || strings.Count(strings.TrimSpace(stderr), "\n") > 0 {
			t.Errorf("synth %v: exit %d, stderr %q; want exit 2 and one line with %q", tc.args, code, stderr, tc.want)
		}
	}
}
