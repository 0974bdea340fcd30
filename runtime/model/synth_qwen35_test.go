package model

import (
	"bytes"
	"context"
	"math"
	"slices"
	"strconv"
	"strings"
	"testing"

	fx "github.com/lesfarm/lesfarm/internal/fixture"
	"github.com/lesfarm/lesfarm/runtime/gguf"
	"github.com/lesfarm/lesfarm/runtime/tensor"
)

// fixtureQwen35 is the golden qwen35moe fixture's geometry
// (../shared/testdata/qwen35moe/README.md).
func fixtureQwen35(typ tensor.Type) SynthConfig {
	return SynthConfig{
		Arch: "qwen35moe", Layers: 8, Experts: 16, ExpertsUsed: 4, Hidden: 256, ExpertFFN: 64,
		Heads: 4, KVHeads: 2, HeadDim: 64, Vocab: 4096, Context: 2048, Type: typ, Seed: 5,
		Qwen35: Qwen35{SharedFFN: 64, FullAttnInterval: 4, MTPLayers: 1, SSMGroups: 2, SSMHeads: 4, SSMState: 32, ConvKernel: 4, RopeDim: 16},
	}
}

func synthFile(t *testing.T, c SynthConfig) *gguf.File {
	t.Helper()
	var buf bytes.Buffer
	if err := WriteSynthetic(&buf, c); err != nil {
		t.Fatal(err)
	}
	f, err := gguf.Parse(bytes.NewReader(buf.Bytes()), int64(buf.Len()))
	if err != nil {
		t.Fatalf("synthetic qwen35moe does not parse: %v", err)
	}
	return f
}

// TestSynthQwen35MatchesFixture writes a synthetic qwen35moe of the golden
// fixture's geometry and checks that it has every metadata key of the
// fixture (with the same value for every geometry key) and exactly the
// fixture's tensors, names and dims, in the same order.
func TestSynthQwen35MatchesFixture(t *testing.T) {
	ref, err := gguf.Open(fx.Shared(t, "qwen35moe/tiny-qwen35moe-f32.gguf", ""))
	if err != nil {
		t.Fatal(err)
	}
	defer ref.Close()
	f := synthFile(t, fixtureQwen35(tensor.F32))
	for _, kv := range ref.KVs() {
		v, ok := f.Value(kv.Key)
		if !ok {
			t.Errorf("synthetic file lacks key %s", kv.Key)
			continue
		}
		if strings.HasPrefix(kv.Key, "qwen35moe.") || kv.Key == "general.architecture" || kv.Key == "general.file_type" || kv.Key == "tokenizer.ggml.pre" || kv.Key == "tokenizer.ggml.model" {
			if got, want := v.String(), kv.Value.String(); got != want {
				if a, err := f.Int32s(kv.Key); err == nil {
					b, _ := ref.Int32s(kv.Key)
					if slices.Equal(a, b) {
						continue
					}
				}
				t.Errorf("key %s = %s, fixture has %s", kv.Key, got, want)
			}
		}
	}
	rt, st := ref.Tensors(), f.Tensors()
	if len(rt) != len(st) {
		t.Errorf("%d tensors, fixture has %d", len(st), len(rt))
	}
	for i := range min(len(rt), len(st)) {
		if rt[i].Name != st[i].Name || !slices.Equal(rt[i].Dims, st[i].Dims) || st[i].Type != tensor.F32 {
			t.Errorf("tensor %d: %s %v %s, fixture %s %v %s", i, st[i].Name, st[i].Dims, st[i].Type, rt[i].Name, rt[i].Dims, rt[i].Type)
		}
	}
}

// TestSynthQwen35Values checks the generated values follow the fixture's
// recipe where the forward pass depends on their sign or range: ssm_a is
// negative (decay exp(g) < 1), norms are near 1.
func TestSynthQwen35Values(t *testing.T) {
	f := synthFile(t, fixtureQwen35(tensor.F32))
	for name, check := range map[string]func(float32) bool{
		"blk.0.ssm_a":            func(v float32) bool { return v < 0 && v > -20 },
		"blk.0.attn_norm.weight": func(v float32) bool { return v > 0.4 && v < 1.6 },
	} {
		data, err := f.ReadTensor(name)
		if err != nil {
			t.Fatal(err)
		}
		vals := make([]float32, len(data)/4)
		if err := tensor.Dequantize(tensor.F32, data, vals); err != nil {
			t.Fatal(err)
		}
		for i, v := range vals {
			if math.IsNaN(float64(v)) || !check(v) {
				t.Fatalf("%s[%d] = %v is out of range", name, i, v)
			}
		}
	}
}

// TestSynthQwen35Geometries writes quantized and unusual geometries
// (all-attention, no MTP, several MTP blocks) and checks the layer pattern
// and that quantized matrices fall back to a type that fits their rows.
func TestSynthQwen35Geometries(t *testing.T) {
	for _, tc := range []struct {
		name     string
		edit     func(*SynthConfig)
		attn     []int // full-attention decoder layers
		tensors  int
		mtpFirst string
	}{
		{"fixture-q4k", func(c *SynthConfig) { c.Type = tensor.Q4_K }, []int{3, 7}, 169, "blk.8.nextn.eh_proj.weight"},
		{"no-mtp-q8", func(c *SynthConfig) { c.Type = tensor.Q8_0; c.NoMTP = true }, []int{3, 7}, 149, ""},
		{"interval1-mtp2", func(c *SynthConfig) { c.Layers = 3; c.FullAttnInterval = 1; c.MTPLayers = 2 }, []int{0, 1, 2}, 3 + 3*16 + 2*20, "blk.3.nextn.eh_proj.weight"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := fixtureQwen35(tensor.F32)
			tc.edit(&c)
			if err := c.Defaults(); err != nil {
				t.Fatal(err)
			}
			f := synthFile(t, c)
			if n := len(f.Tensors()); n != tc.tensors {
				t.Errorf("%d tensors, want %d", n, tc.tensors)
			}
			var attn []int
			for l := range c.Layers {
				_, q := f.Tensor(blkName(l, "attn_q.weight"))
				_, qkv := f.Tensor(blkName(l, "attn_qkv.weight"))
				if q == qkv {
					t.Errorf("layer %d: attn_q present %v, attn_qkv present %v; want exactly one", l, q, qkv)
				}
				if q {
					attn = append(attn, l)
				}
			}
			if !slices.Equal(attn, tc.attn) {
				t.Errorf("full-attention layers %v, want %v", attn, tc.attn)
			}
			if tc.mtpFirst != "" {
				if _, ok := f.Tensor(tc.mtpFirst); !ok {
					t.Errorf("MTP tensor %s missing", tc.mtpFirst)
				}
			}
			n, _ := f.Uint("qwen35moe.nextn_predict_layers")
			bc, _ := f.Uint("qwen35moe.block_count")
			if int(bc) != c.Layers+c.MTPLayers || int(n) != c.MTPLayers {
				t.Errorf("block_count %d nextn %d, want %d and %d", bc, n, c.Layers+c.MTPLayers, c.MTPLayers)
			}
			for _, ti := range f.Tensors() {
				if len(ti.Dims) >= 2 {
					if _, err := ti.Type.RowSize(int(ti.Dims[0])); err != nil {
						t.Errorf("%s: type %s does not fit rows of %d", ti.Name, ti.Type, ti.Dims[0])
					}
				}
			}
		})
	}
}

func blkName(l int, s string) string { return "blk." + strconv.Itoa(l) + "." + s }

// TestSynthQwen35Presets checks the published 35B-A3B shape and its
// scaled version: parameter counts (about 35B total, 3B active) and sizes.
func TestSynthQwen35Presets(t *testing.T) {
	full := SynthPresets["qwen35moe-35b-a3b"]
	full.Type = tensor.Q4_K
	if err := full.Defaults(); err != nil {
		t.Fatal(err)
	}
	var params, expert int64
	for _, ts := range full.tensors() {
		n := int64(1)
		for _, d := range ts.dims {
			n *= int64(d)
		}
		params += n
		if strings.Contains(ts.name, "_exps.") {
			expert += n
		}
	}
	// Active: all but the routed experts not chosen and the embedding
	// table (one row is read per token).
	embd := int64(full.Hidden) * int64(full.Vocab)
	active := params - expert + expert/int64(full.Experts)*int64(full.ExpertsUsed) - embd
	t.Logf("35B-A3B: %.2fB parameters, %.2fB active", float64(params)/1e9, float64(active)/1e9)
	if params < 34e9 || params > 37e9 || active < 2.5e9 || active > 4.2e9 {
		t.Fatalf("35B-A3B preset has %d parameters (%d active), want ~35B (~3B)", params, active)
	}
	for _, name := range PresetNames() {
		c := SynthPresets[name]
		c.Type = tensor.Q4_K
		size, err := SynthSize(c)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		t.Logf("%s: %.2f GB in Q4_K", name, float64(size)/1e9)
	}
}

// TestSynthQwen35Loads loads synthetic qwen35moe models (F32 and Q4_K,
// with and without an MTP block) and checks that a prefill gives finite,
// token-dependent logits and that routing spreads over the experts.
func TestSynthQwen35Loads(t *testing.T) {
	for _, tc := range []struct {
		name string
		typ  tensor.Type
		mtp  bool
	}{{"f32-mtp", tensor.F32, true}, {"q4k-nomtp", tensor.Q4_K, false}} {
		t.Run(tc.name, func(t *testing.T) {
			c := fixtureQwen35(tc.typ)
			c.Layers, c.NoMTP = 4, !tc.mtp
			m, err := Load(writeSynth(t, c), Options{})
			if err != nil {
				t.Fatal(err)
			}
			defer m.Close()
			if m.HasMTP() != tc.mtp {
				t.Fatalf("HasMTP %v, want %v", m.HasMTP(), tc.mtp)
			}
			st, err := m.NewState(64)
			if err != nil {
				t.Fatal(err)
			}
			used := map[[2]int]bool{}
			st.OnRoute = func(pos, layer int, experts []int, _ []float32) {
				for _, e := range experts {
					used[[2]int{layer, e}] = true
				}
			}
			toks := make([]int, 32)
			for i := range toks {
				toks[i] = (i*37 + 11) % c.Vocab
			}
			logits, err := st.Forward(context.Background(), toks, false)
			if err != nil {
				t.Fatal(err)
			}
			var sq float64
			for _, v := range logits {
				if math.IsNaN(float64(v)) || math.IsInf(float64(v), 0) {
					t.Fatalf("non-finite logit %v", v)
				}
				sq += float64(v) * float64(v)
			}
			if rms := math.Sqrt(sq / float64(len(logits))); rms < 0.3 || rms > 30 {
				t.Fatalf("logit rms %.3g: activations degenerate", rms)
			}
			if len(used) < 4*c.Layers*3 {
				t.Fatalf("only %d of %d (layer, expert) pairs used: routing degenerate", len(used), c.Layers*c.Experts)
			}
		})
	}
}
