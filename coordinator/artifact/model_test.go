package artifact

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/lesfarm/lesfarm/runtime/gguf"
	"github.com/lesfarm/lesfarm/runtime/model"
	"github.com/lesfarm/lesfarm/runtime/pack"
	"github.com/lesfarm/lesfarm/runtime/tensor"
)

// synthModel writes a small random-weight model with runtime/model's synth
// writer (no shared fixtures needed).
func synthModel(t testing.TB, arch string, typ tensor.Type) []byte {
	t.Helper()
	var buf bytes.Buffer
	c := model.SynthConfig{Arch: arch, Layers: 2, Experts: 4, ExpertsUsed: 2, Hidden: 64, ExpertFFN: 32, Heads: 2, Vocab: 300, Type: typ, Seed: 1}
	if err := model.WriteSynthetic(&buf, c); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// fakeModel writes a GGUF claiming architecture arch with one tensor of
// type typ (and optional extra metadata).
func fakeModel(t testing.TB, arch string, typ tensor.Type, kvs ...any) []byte {
	t.Helper()
	var buf bytes.Buffer
	w := gguf.NewWriter(&buf)
	if err := w.AddKV("general.architecture", arch); err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(kvs); i += 2 {
		if err := w.AddKV(kvs[i].(string), kvs[i+1]); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.AddTensor("blk.0.ffn_up_exps.weight", typ, []uint64{256, 2, 2}); err != nil {
		t.Fatal(err)
	}
	if err := w.AddTensor("token_embd.weight", typ, []uint64{256, 4}); err != nil {
		t.Fatal(err)
	}
	if err := w.WriteHeader(); err != nil {
		t.Fatal(err)
	}
	for _, n := range []string{"blk.0.ffn_up_exps.weight", "token_embd.weight"} {
		size, _ := gguf.TensorSize(typ, map[string][]uint64{"blk.0.ffn_up_exps.weight": {256, 2, 2}, "token_embd.weight": {256, 4}}[n])
		if err := w.WriteTensor(n, make([]byte, size)); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// expertBytesOf sums the stacked expert tensors independently of
// isExpertTensor, to check it.
func expertBytesOf(t *testing.T, data []byte) (total, experts int64) {
	t.Helper()
	f, err := gguf.Parse(bytes.NewReader(data), int64(len(data)))
	if err != nil {
		t.Fatal(err)
	}
	for _, ti := range f.Tensors() {
		total += ti.Size
		if strings.HasSuffix(ti.Name, "_exps.weight") {
			experts += ti.Size
		}
	}
	return total, experts
}

func TestReadModelFactsSynthetic(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		arch  string
		typ   tensor.Type
		moe   bool
		types []string
	}{
		{"qwen3moe", tensor.Q8_0, true, []string{"F32", "Q8_0"}},
		{"qwen3moe", tensor.F32, true, []string{"F32"}},
		{"qwen3", tensor.Q8_0, false, []string{"F32", "Q8_0"}},
	} {
		t.Run(tc.arch+"-"+tc.typ.String(), func(t *testing.T) {
			data := synthModel(t, tc.arch, tc.typ)
			f, err := ReadModelFacts(bytes.NewReader(data), int64(len(data)))
			if err != nil || f == nil {
				t.Fatalf("facts %+v err %v", f, err)
			}
			total, experts := expertBytesOf(t, data)
			if f.Architecture != tc.arch || f.MoE != tc.moe || f.Packed || !slices.Equal(f.TensorTypes, tc.types) {
				t.Fatalf("facts %+v", f)
			}
			if f.TotalBytes != total || f.ExpertBytes != experts || f.ResidentBytes != total-experts {
				t.Fatalf("bytes: total %d experts %d resident %d, want %d %d %d", f.TotalBytes, f.ExpertBytes, f.ResidentBytes, total, experts, total-experts)
			}
			if tc.moe && (f.ExpertCount != 4 || f.ExpertsUsed != 2 || experts == 0) {
				t.Fatalf("expert geometry: %+v", f)
			}
			if !tc.moe && (f.ExpertCount != 0 || f.ExpertBytes != 0) {
				t.Fatalf("dense model has experts: %+v", f)
			}
			if f.TotalBytes >= int64(len(data)) {
				t.Fatalf("tensor bytes %d not below the file size %d", f.TotalBytes, len(data))
			}
		})
	}
}

// TestReadModelFactsPacked: a file rewritten by lesfarm pack is marked
// packed and keeps the same expert and resident bytes (the per-expert
// tensors blk.L.ffn_*.E.weight count as experts).
func TestReadModelFactsPacked(t *testing.T) {
	t.Parallel()
	data := synthModel(t, "qwen3moe", tensor.Q8_0)
	dir := t.TempDir()
	in, out := filepath.Join(dir, "m.gguf"), filepath.Join(dir, "m.packed.gguf")
	if err := os.WriteFile(in, data, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := pack.Pack(context.Background(), in, out, pack.Options{}); err != nil {
		t.Fatal(err)
	}
	packed, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	a, err := ReadModelFacts(bytes.NewReader(data), int64(len(data)))
	if err != nil {
		t.Fatal(err)
	}
	b, err := ReadModelFacts(bytes.NewReader(packed), int64(len(packed)))
	if err != nil {
		t.Fatal(err)
	}
	if !b.Packed || a.Packed || b.ExpertBytes != a.ExpertBytes || b.ResidentBytes != a.ResidentBytes || b.Architecture != "qwen3moe" {
		t.Fatalf("unpacked %+v\npacked %+v", a, b)
	}
}

func TestReadModelFactsOtherContent(t *testing.T) {
	t.Parallel()
	for name, data := range map[string][]byte{
		"empty":       nil,
		"text":        []byte("hello, this is not a model at all, just some text bytes"),
		"short gguf":  []byte("GGUF"),
		"zip":         append([]byte("PK\x03\x04"), make([]byte, 100)...),
		"almost gguf": append([]byte("GGUf"), make([]byte, 100)...),
	} {
		f, err := ReadModelFacts(bytes.NewReader(data), int64(len(data)))
		if f != nil || err != nil {
			t.Errorf("%s: facts %+v err %v, want none", name, f, err)
		}
	}
}

func TestReadModelFactsBadHeaders(t *testing.T) {
	t.Parallel()
	good := fakeModel(t, "llama4", tensor.Q4_K)
	noArch := func() []byte {
		var buf bytes.Buffer
		w := gguf.NewWriter(&buf)
		w.AddKV("general.name", "x")
		w.WriteHeader()
		w.Close()
		return buf.Bytes()
	}()
	for _, tc := range []struct {
		name string
		data []byte
		in   string
	}{
		{"truncated", good[:40], ""},
		{"no architecture", noArch, "general.architecture"},
		{"long architecture", fakeModel(t, strings.Repeat("x", 100), tensor.F32), "short printable"},
		{"control characters", fakeModel(t, "qwen3\nmoe", tensor.F32), "short printable"},
		{"huge kv count", func() []byte {
			b := bytes.Clone(good)
			binary.LittleEndian.PutUint64(b[16:], 1<<62)
			return b
		}(), "metadata"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f, err := ReadModelFacts(bytes.NewReader(tc.data), int64(len(tc.data)))
			if err == nil || f != nil || !strings.Contains(err.Error(), tc.in) {
				t.Fatalf("facts %+v err %v, want an error mentioning %q", f, err, tc.in)
			}
		})
	}
	f, err := ReadModelFacts(bytes.NewReader(good), int64(len(good)))
	if err != nil || f.Architecture != "llama4" || !slices.Equal(f.TensorTypes, []string{"Q4_K"}) || !f.MoE {
		t.Fatalf("llama4 header: %+v %v", f, err)
	}
}

// TestReadModelFactsHeaderWindow: a header that does not end within
// MaxHeaderBytes is refused without reading further.
func TestReadModelFactsHeaderWindow(t *testing.T) {
	t.Parallel()
	r := &countingReaderAt{r: bytes.NewReader(fakeModel(t, "qwen3", tensor.F32))}
	w := windowReader{r: r, n: 10}
	p := make([]byte, 64)
	if n, err := w.ReadAt(p, 0); n != 10 || !errors.Is(err, errHeaderWindow) {
		t.Fatalf("read across the window: %d %v", n, err)
	}
	if n, err := w.ReadAt(p, 10); n != 0 || !errors.Is(err, errHeaderWindow) {
		t.Fatalf("read past the window: %d %v", n, err)
	}
	if r.max > 10 {
		t.Fatalf("read up to byte %d through a 10-byte window", r.max)
	}
}

type countingReaderAt struct {
	r   *bytes.Reader
	max int64
}

func (c *countingReaderAt) ReadAt(p []byte, off int64) (int, error) {
	n, err := c.r.ReadAt(p, off)
	c.max = max(c.max, off+int64(n))
	return n, err
}

// TestReadModelFactsReadsOnlyTheHeader: the tensor data is never read.
func TestReadModelFactsReadsOnlyTheHeader(t *testing.T) {
	t.Parallel()
	data := synthModel(t, "qwen3moe", tensor.F32)
	f, err := gguf.Parse(bytes.NewReader(data), int64(len(data)))
	if err != nil {
		t.Fatal(err)
	}
	r := &countingReaderAt{r: bytes.NewReader(data)}
	if _, err := ReadModelFacts(r, int64(len(data))); err != nil {
		t.Fatal(err)
	}
	// bufio reads ahead up to 64 KiB past the header; never the rest.
	if r.max > f.DataOffset+64<<10 || r.max >= int64(len(data)) {
		t.Fatalf("read up to byte %d; header ends at %d, file has %d", r.max, f.DataOffset, len(data))
	}
}

func TestIsExpertTensor(t *testing.T) {
	t.Parallel()
	for name, want := range map[string]bool{
		"blk.7.ffn_gate_up_exps.weight":   true,
		"blk.7.ffn_gate_inp_shexp.weight": false,
		"blk.7.ffn_up_shexp.weight":       false,
		"blk.0.ffn_gate_exps.weight":      true,
		"blk.12.ffn_down_exps.weight":     true,
		"blk.3.ffn_up.17.weight":          true,
		"blk.3.ffn_gate.0.weight":         true,
		"blk.0.ffn_gate.weight":           false, // dense FFN
		"blk.0.ffn_gate_shexp.weight":     false, // shared expert
		"blk.0.ffn_gate_inp.weight":       false, // router
		"blk.x.ffn_up_exps.weight":        false,
		"token_embd.weight":               false,
		"blk.3.ffn_up.17.bias":            false,
		"blk.3.ffn_up.a.weight":           false,
		"output.ffn_up_exps.weight":       false,
		"blk.0.attn_q.weight":             false,
		"blk..ffn_up_exps.weight":         false,
		"blk.0.ffn_down_exps.bias":        true,
		"blk.0.ffn_down_exps":             false,
		"blk.0.ffn_downward.0.weight":     false,
		"blk.0.ffn_up.0.weight.extra":     false,
		"blk.0.ffn_up.0.0.weight":         false,
		"blk.99999.ffn_up_exps.weight":    true,
	} {
		if got := isExpertTensor(name); got != want {
			t.Errorf("isExpertTensor(%q) = %v, want %v", name, got, want)
		}
	}
}

// FuzzReadModelFacts: hostile headers never panic, and facts that come
// back always validate and add up.
func FuzzReadModelFacts(f *testing.F) {
	f.Add(fakeModel(f, "llama4", tensor.Q4_K))
	f.Add(fakeModel(f, "qwen3moe", tensor.F32, "qwen3moe.expert_count", uint32(4), "les.pack.version", uint32(1)))
	syn := synthModel(f, "qwen3moe", tensor.F32)
	sf, _ := gguf.Parse(bytes.NewReader(syn), int64(len(syn)))
	f.Add(syn[:sf.DataOffset]) // header only: tensors run past the end
	q35 := qwen35Model(f)
	qf, _ := gguf.Parse(bytes.NewReader(q35), int64(len(q35)))
	f.Add(q35[:qf.DataOffset])
	f.Add([]byte("GGUF\x03\x00\x00\x00"))
	f.Add([]byte("not gguf"))
	f.Fuzz(func(t *testing.T, data []byte) {
		facts, err := ReadModelFacts(bytes.NewReader(data), int64(len(data)))
		if err != nil {
			if facts != nil {
				t.Fatal("facts with an error")
			}
			return
		}
		if facts == nil {
			return
		}
		if err := facts.Validate(); err != nil {
			t.Fatalf("facts do not validate: %v (%+v)", err, facts)
		}
		if facts.ResidentBytes+facts.ExpertBytes != facts.TotalBytes {
			t.Fatalf("bytes do not add up: %+v", facts)
		}
	})
}
