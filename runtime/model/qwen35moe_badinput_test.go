package model

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/lesfarm/lesfarm/runtime/tensor"
)

// microQwen35 is the smallest qwen35moe geometry the loader accepts with
// every block present (fuzz seeds, bad-input tests).
func microQwen35(typ tensor.Type) tinyQwen35 {
	return tinyQwen35{Layers: 2, Experts: 2, Used: 1, Hidden: 32, FFN: 32, SharedFFN: 32, Vocab: 300,
		Heads: 2, KVHeads: 1, HeadDim: 16, RopeDim: 4, KHeads: 1, VHeads: 2, StateDim: 8, Conv: 2, Interval: 2, NextN: 1,
		Type: typ, Seed: 3}
}

func dropTensor(name string) func(map[string]any, *[]synthTensor) {
	return func(_ map[string]any, ts *[]synthTensor) {
		out := (*ts)[:0]
		for _, t := range *ts {
			if t.name != name {
				out = append(out, t)
			}
		}
		*ts = out
	}
}

// TestQwen35BadInput: malformed qwen35moe files fail to load with a
// one-line error naming the problem, never a panic.
func TestQwen35BadInput(t *testing.T) {
	const a = "qwen35moe."
	set := func(k string, v any) func(map[string]any, *[]synthTensor) {
		return func(kv map[string]any, _ *[]synthTensor) { kv[k] = v }
	}
	tests := []struct {
		name   string
		mutate func(map[string]any, *[]synthTensor)
		want   string
	}{
		{"v head size differs from state size", set(a+"ssm.inner_size", uint32(96)), "must equal ssm.state_size"},
		{"v heads not a multiple of k heads", set(a+"ssm.time_step_rank", uint32(3)), "bad DeltaNet geometry"},
		{"state size missing", func(kv map[string]any, _ *[]synthTensor) { delete(kv, a+"ssm.state_size") }, "ssm.state_size is missing"},
		{"missing shared-expert tensor", dropTensor("blk.1.ffn_down_shexp.weight"), "blk.1.ffn_down_shexp.weight is missing"},
		{"missing shared-expert gate", dropTensor("blk.0.ffn_gate_inp_shexp.weight"), "blk.0.ffn_gate_inp_shexp.weight is missing"},
		{"shared FFN width missing", func(kv map[string]any, _ *[]synthTensor) { delete(kv, a+"expert_shared_feed_forward_length") }, "expert_shared_feed_forward_length"},
		{"nextn_predict_layers > block_count", set(a+"nextn_predict_layers", uint32(9)), "nextn_predict_layers 9 must be smaller than block_count"},
		{"missing MTP tensor", dropTensor("blk.4.nextn.eh_proj.weight"), "blk.4.nextn.eh_proj.weight is missing"},
		{"missing DeltaNet tensor", dropTensor("blk.2.ssm_conv1d.weight"), "blk.2.ssm_conv1d.weight is missing"},
		{"conv kernel mismatch", set(a+"ssm.conv_kernel", uint32(3)), "ssm_conv1d.weight has dims"},
		{"value length differs from key length", set(a+"attention.value_length", uint32(32)), "value_length"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := defaultTinyQwen35(tensor.F32)
			c.Mutate = tc.mutate
			_, err := Load(tinyQwen35File(t, c), Options{})
			checkOneLine(t, err, tc.want)
		})
	}
	t.Run("truncated file", func(t *testing.T) {
		p := tinyQwen35File(t, defaultTinyQwen35(tensor.Q4_K))
		fi, err := os.Stat(p)
		if err != nil {
			t.Fatal(err)
		}
		for _, size := range []int64{fi.Size() / 2, fi.Size() - 1, 100} {
			if err := os.Truncate(p, size); err != nil {
				t.Fatal(err)
			}
			_, err := Load(p, Options{})
			checkOneLine(t, err, "")
		}
	})
}

func checkOneLine(t *testing.T, err error, want string) {
	t.Helper()
	if err == nil {
		t.Fatal("loaded without error")
	}
	msg := err.Error()
	if strings.Contains(msg, "\n") {
		t.Errorf("error is not one line: %q", msg)
	}
	if !strings.Contains(msg, want) {
		t.Errorf("error %q does not say %q", msg, want)
	}
	t.Log(msg)
}

// FuzzLoadQwen35 feeds mutated micro qwen35moe models to Load and, when
// they load, to a forward pass, a rollback and the MTP block: a corrupt
// file must give an error, never a panic or a huge allocation.
func FuzzLoadQwen35(f *testing.F) {
	for _, typ := range []tensor.Type{tensor.Q8_0, tensor.F32} {
		var buf bytes.Buffer
		if err := microQwen35(typ).write(&buf); err != nil {
			f.Fatal(err)
		}
		f.Add(buf.Bytes())
	}
	dir := f.TempDir()
	// The seeds must load and run, or the fuzzer never reaches the forward pass.
	p := filepath.Join(dir, "seed.gguf")
	var buf bytes.Buffer
	if err := microQwen35(tensor.Q8_0).write(&buf); err != nil {
		f.Fatal(err)
	}
	if err := os.WriteFile(p, buf.Bytes(), 0o644); err != nil {
		f.Fatal(err)
	}
	m, err := Load(p, Options{})
	if err != nil {
		f.Fatalf("micro seed does not load: %v", err)
	}
	if !m.HasMTP() {
		f.Fatal("micro seed has no MTP block")
	}
	m.Close()
	f.Fuzz(func(t *testing.T, data []byte) {
		p := filepath.Join(dir, "fuzz.gguf")
		if err := os.WriteFile(p, data, 0o644); err != nil {
			t.Fatal(err)
		}
		m, err := Load(p, Options{})
		if err != nil {
			return
		}
		defer m.Close()
		st, err := m.NewState(8)
		if err != nil {
			return
		}
		ctx := context.Background()
		if _, err := st.Forward(ctx, []int{0, m.Vocab - 1, 1}, true); err != nil {
			return
		}
		st.Truncate(1)
		_, _ = st.Forward(ctx, []int{m.Vocab - 1}, false)
		if d, err := m.NewMTP(4); err == nil {
			_, _ = d.Forward(ctx, []int{0}, st.OutputHidden(1), false)
		}
	})
}
