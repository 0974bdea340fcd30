package artifact

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/lesfarm/lesfarm/protocol"
	"github.com/lesfarm/lesfarm/runtime/gguf"
	"github.com/lesfarm/lesfarm/runtime/model"
	"github.com/lesfarm/lesfarm/runtime/pack"
	"github.com/lesfarm/lesfarm/runtime/tensor"
)

// qwen35Config is a small qwen35moe geometry: layers 0-2 Gated DeltaNet,
// 3 full attention, block 4 the MTP block.
func qwen35Config() model.SynthConfig {
	return model.SynthConfig{Arch: "qwen35moe", Layers: 4, Experts: 4, ExpertsUsed: 2, Hidden: 64, ExpertFFN: 32, Heads: 2, KVHeads: 1, HeadDim: 32,
		Vocab: 300, Type: tensor.F32, Seed: 1, Qwen35: model.Qwen35{SSMGroups: 1, SSMHeads: 2, SSMState: 16, ConvKernel: 4}}
}

func qwen35Model(t testing.TB) []byte {
	t.Helper()
	var buf bytes.Buffer
	if err := model.WriteSynthetic(&buf, qwen35Config()); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// rewriteModel rebuilds a GGUF with metadata edited by kv (return false to
// drop a key) and tensors dropped or re-dimensioned by ts (same data).
func rewriteModel(t testing.TB, data []byte, kv func(key string, v gguf.Value) (any, bool), ts func(name string, dims []uint64) ([]uint64, bool)) []byte {
	t.Helper()
	f, err := gguf.Parse(bytes.NewReader(data), int64(len(data)))
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	w := gguf.NewWriter(&buf)
	for _, p := range f.KVs() {
		v, keep := any(p.Value), true
		if kv != nil {
			v, keep = kv(p.Key, p.Value)
		}
		if keep {
			if err := w.AddKV(p.Key, v); err != nil {
				t.Fatal(err)
			}
		}
	}
	var kept []*gguf.TensorInfo
	for _, ti := range f.Tensors() {
		dims, keep := ti.Dims, true
		if ts != nil {
			dims, keep = ts(ti.Name, ti.Dims)
		}
		if keep {
			if err := w.AddTensor(ti.Name, ti.Type, dims); err != nil {
				t.Fatal(err)
			}
			kept = append(kept, ti)
		}
	}
	if err := w.WriteHeader(); err != nil {
		t.Fatal(err)
	}
	for _, ti := range kept {
		b, _ := f.ReadTensor(ti.Name)
		if err := w.WriteTensor(ti.Name, b); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// TestReadModelFactsQwen35 reads the facts of a synthetic qwen35moe, of
// its compat-packed form (merged ffn_gate_up_exps) and of its blob-packed
// form: the recurrent geometry the agent sizes state from, and the routed
// expert bytes (shared experts stay resident).
func TestReadModelFactsQwen35(t *testing.T) {
	t.Parallel()
	data := qwen35Model(t)
	dir := t.TempDir()
	in := filepath.Join(dir, "q35.gguf")
	if err := os.WriteFile(in, data, 0o644); err != nil {
		t.Fatal(err)
	}
	want := &protocol.RecurrentFacts{Layers: 3, ConvKernel: 4, ConvChannels: 2*1*16 + 2*16, Heads: 2, StateSize: 16}
	total, experts := expertBytesOf(t, data)
	for _, layout := range []string{"", pack.LayoutBlob, pack.LayoutCompat} {
		t.Run("layout="+layout, func(t *testing.T) {
			b := data
			if layout != "" {
				out := filepath.Join(dir, layout+".gguf")
				if err := pack.Pack(context.Background(), in, out, pack.Options{Layout: layout, GateUp: pack.GateUpMerged}); err != nil {
					t.Fatal(err)
				}
				var err error
				if b, err = os.ReadFile(out); err != nil {
					t.Fatal(err)
				}
			}
			f, err := ReadModelFacts(bytes.NewReader(b), int64(len(b)))
			if err != nil {
				t.Fatal(err)
			}
			if f.Recurrent == nil || *f.Recurrent != *want {
				t.Fatalf("recurrent facts %+v, want %+v", f.Recurrent, want)
			}
			if f.TotalBytes != total || f.ExpertBytes != experts || !f.MoE || f.Packed != (layout != "") {
				t.Fatalf("facts %+v; want total %d, experts %d", f, total, experts)
			}
			if err := f.Validate(); err != nil {
				t.Fatal(err)
			}
		})
	}
	// The shared fixture, when present, gives the fixture README's geometry.
	if b, err := os.ReadFile(filepath.Join("..", "..", "..", "shared", "testdata", "qwen35moe", "tiny-qwen35moe-q4_k_m.gguf")); err == nil {
		f, err := ReadModelFacts(bytes.NewReader(b), int64(len(b)))
		if err != nil {
			t.Fatalf("fixture: %v", err)
		}
		if r := f.Recurrent; r == nil || *r != (protocol.RecurrentFacts{Layers: 6, ConvKernel: 4, ConvChannels: 256, Heads: 4, StateSize: 32}) {
			t.Fatalf("fixture recurrent facts %+v", f.Recurrent)
		}
	}
}

// TestReadModelFactsQwen35BadInput: qwen35moe headers with missing or
// inconsistent keys and tensors get a one-line error at upload.
func TestReadModelFactsQwen35BadInput(t *testing.T) {
	t.Parallel()
	data := qwen35Model(t)
	setKV := func(key string, val any) func(string, gguf.Value) (any, bool) {
		return func(k string, v gguf.Value) (any, bool) {
			if k == key {
				return val, val != nil
			}
			return v, true
		}
	}
	drop := func(name string) func(string, []uint64) ([]uint64, bool) {
		return func(n string, d []uint64) ([]uint64, bool) { return d, n != name }
	}
	for _, tc := range []struct {
		name string
		data []byte
		want string
	}{
		{"v head size != state size", rewriteModel(t, data, setKV("qwen35moe.ssm.inner_size", uint32(48)), nil), "v head size of 24, which must equal ssm.state_size 16"},
		{"missing ssm key", rewriteModel(t, data, setKV("qwen35moe.ssm.conv_kernel", nil), nil), "qwen35moe.ssm.conv_kernel is missing"},
		{"nextn too large", rewriteModel(t, data, setKV("qwen35moe.nextn_predict_layers", uint32(5)), nil), "nextn_predict_layers 5 must be smaller than block_count 5"},
		{"v heads not a multiple", rewriteModel(t, data, setKV("qwen35moe.ssm.group_count", uint32(3)), nil), "must be a multiple of ssm.group_count 3"},
		{"missing shared expert", rewriteModel(t, data, nil, drop("blk.2.ffn_up_shexp.weight")), "tensor blk.2.ffn_up_shexp.weight is missing"},
		{"missing DeltaNet tensor", rewriteModel(t, data, nil, drop("blk.1.ssm_a")), "tensor blk.1.ssm_a is missing"},
		{"missing MTP tensor", rewriteModel(t, data, nil, drop("blk.4.nextn.eh_proj.weight")), "tensor blk.4.nextn.eh_proj.weight is missing"},
		{"conv of the wrong width", rewriteModel(t, data, nil, func(n string, d []uint64) ([]uint64, bool) {
			if n == "blk.0.ssm_conv1d.weight" {
				return []uint64{d[0] * 2, d[1] / 2}, true
			}
			return d, true
		}), "blk.0.ssm_conv1d.weight has dims [8 32], want [4 64]"},
		{"truncated", data[:len(data)/100], ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f, err := ReadModelFacts(bytes.NewReader(tc.data), int64(len(tc.data)))
			if err == nil || f != nil || !strings.Contains(err.Error(), tc.want) || strings.Contains(err.Error(), "\n") {
				t.Fatalf("facts %+v err %v, want one line containing %q", f, err, tc.want)
			}
		})
	}
}
