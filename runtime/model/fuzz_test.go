package model

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/lesfarm/lesfarm/runtime/pack"
	"github.com/lesfarm/lesfarm/runtime/tensor"
)

// FuzzLoad feeds mutated small GGUF models to Load and, when they load, to
// a forward pass: a corrupt or hostile file must give an error, never a
// panic or a huge allocation. Seeds are tiny synthetic models of two types and
// the packed form of one.
func FuzzLoad(f *testing.F) {
	for _, typ := range []tensor.Type{tensor.Q8_0, tensor.F16} {
		var buf bytes.Buffer
		c := SynthConfig{Layers: 1, Experts: 2, ExpertsUsed: 1, Hidden: 32, ExpertFFN: 32, Heads: 2, Vocab: 300, Context: 16, Type: typ, Seed: 1}
		if err := WriteSynthetic(&buf, c); err != nil {
			f.Fatal(err)
		}
		f.Add(buf.Bytes())
	}
	// A packed seed (lesfarm pack), so mutations reach the les.pack.* and
	// per-expert tensor binding.
	dir := f.TempDir()
	var buf bytes.Buffer
	c := SynthConfig{Layers: 1, Experts: 2, ExpertsUsed: 1, Hidden: 32, ExpertFFN: 32, Heads: 2, Vocab: 300, Context: 16, Type: tensor.Q8_0, Seed: 2}
	if err := WriteSynthetic(&buf, c); err != nil {
		f.Fatal(err)
	}
	in, out := filepath.Join(dir, "seed.gguf"), filepath.Join(dir, "seed.packed.gguf")
	if err := os.WriteFile(in, buf.Bytes(), 0o644); err != nil {
		f.Fatal(err)
	}
	if err := pack.Pack(context.Background(), in, out, pack.Options{}); err != nil {
		f.Fatal(err)
	}
	packed, err := os.ReadFile(out)
	if err != nil {
		f.Fatal(err)
	}
	f.Add(packed)
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
		st, err := m.NewState(4)
		if err != nil {
			return
		}
		_, _ = st.Forward(context.Background(), []int{0, m.Vocab - 1}, true)
	})
}
