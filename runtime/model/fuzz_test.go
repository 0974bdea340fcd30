package model

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/lesfarm/lesfarm/runtime/tensor"
)

// FuzzLoad feeds mutated small GGUF models to Load and, when they load, to
// a forward pass: a corrupt or hostile file must give an error, never a
// panic or a huge allocation. Seeds are tiny synthetic models of two types.
func FuzzLoad(f *testing.F) {
	for _, typ := range []tensor.Type{tensor.Q8_0, tensor.F16} {
		var buf bytes.Buffer
		c := SynthConfig{Layers: 1, Experts: 2, ExpertsUsed: 1, Hidden: 32, ExpertFFN: 32, Heads: 2, Vocab: 300, Context: 16, Type: typ, Seed: 1}
		if err := WriteSynthetic(&buf, c); err != nil {
			f.Fatal(err)
		}
		f.Add(buf.Bytes())
	}
	dir := f.TempDir()
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
