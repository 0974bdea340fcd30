package model

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/lesfarm/lesfarm/runtime/expert"
	"github.com/lesfarm/lesfarm/runtime/gguf"
	"github.com/lesfarm/lesfarm/runtime/moe"
	"github.com/lesfarm/lesfarm/runtime/pack"
)

const packedFixture = "testdata/tiny-qwen3moe-q4_k_m.gguf"

// packInto packs the owned golden fixture into a temporary directory.
func packInto(t *testing.T) (orig, packed string) {
	t.Helper()
	orig = fixture(t, packedFixture)
	packed = filepath.Join(t.TempDir(), "packed.gguf")
	if err := pack.Pack(context.Background(), orig, packed, pack.Options{}); err != nil {
		t.Fatal(err)
	}
	return orig, packed
}

// greedyTrace prefills prompt, then decodes n tokens greedily, returning
// the tokens and the logits of every step (prefill's last position first).
func greedyTrace(t *testing.T, m *Model, prompt []int, n int) ([]int, [][]float32) {
	t.Helper()
	ctx := context.Background()
	st, err := m.NewState(len(prompt) + n)
	if err != nil {
		t.Fatal(err)
	}
	logits, err := st.Forward(ctx, prompt, false)
	if err != nil {
		t.Fatal(err)
	}
	var toks []int
	var all [][]float32
	for {
		all = append(all, slices.Clone(logits))
		toks = append(toks, argmaxF32(logits))
		if len(toks) == n {
			return toks, all
		}
		if logits, err = st.Forward(ctx, toks[len(toks)-1:], false); err != nil {
			t.Fatal(err)
		}
	}
}

func argmaxF32(x []float32) int {
	best := 0
	for i, v := range x {
		if v > x[best] {
			best = i
		}
	}
	return best
}

// sameBits fails the test unless every logit of every step is bit-identical.
func sameBits(t *testing.T, what string, got, want [][]float32) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d steps, want %d", what, len(got), len(want))
	}
	for s := range want {
		for i := range want[s] {
			if math.Float32bits(got[s][i]) != math.Float32bits(want[s][i]) {
				t.Fatalf("%s: step %d logit %d = %v, unpacked %v", what, s, i, got[s][i], want[s][i])
			}
		}
	}
}

// TestPackedLoadsDirectly loads the packed form of the owned golden fixture
// as the model itself: resident (no factory) and through the LES store in
// every mode at a quarter of the expert bytes. Greedy tokens and every
// step's logits must be bit-identical to the unpacked model, and the store
// must read the packed blobs (one read per expert).
func TestPackedLoadsDirectly(t *testing.T) {
	orig, packed := packInto(t)
	prompt := []int{1, 2, 3, 4, 5}
	const n = 12
	base, err := Load(orig, Options{Threads: 1})
	if err != nil {
		t.Fatal(err)
	}
	wantToks, wantLogits := greedyTrace(t, base, prompt, n)
	wantExpertBytes, wantResident := base.ExpertBytes, base.ResidentBytes
	base.Close()

	t.Run("resident", func(t *testing.T) {
		m, err := Load(packed, Options{Threads: 1})
		if err != nil {
			t.Fatal(err)
		}
		defer m.Close()
		if _, ok := m.Experts.(*moe.Resident); !ok {
			t.Fatalf("experts are %T, want *moe.Resident", m.Experts)
		}
		if m.ExpertBytes != wantExpertBytes || m.ResidentBytes != wantResident {
			t.Errorf("packed: expert bytes %d resident %d, unpacked %d %d", m.ExpertBytes, m.ResidentBytes, wantExpertBytes, wantResident)
		}
		toks, logits := greedyTrace(t, m, prompt, n)
		if !slices.Equal(toks, wantToks) {
			t.Fatalf("tokens %v, unpacked %v", toks, wantToks)
		}
		sameBits(t, "resident", logits, wantLogits)
	})
	for _, mode := range expert.Modes() {
		t.Run(mode.String(), func(t *testing.T) {
			var store *expert.Store
			m, err := Load(packed, Options{Threads: 1, Experts: func(f *gguf.File, shapes []moe.LayerShape) (moe.Source, error) {
				var total int64
				for _, s := range shapes {
					total += int64(s.Experts) * s.Bytes()
				}
				s, err := expert.Open(packed, f, shapes, "", expert.Options{Mode: mode, Budget: total / 4, Workers: 4})
				store = s
				return s, err
			}})
			if err != nil {
				t.Fatal(err)
			}
			defer m.Close()
			if !store.Info().Packed {
				t.Fatal("the store reads the packed file as stacked tensors, not one blob per expert")
			}
			toks, logits := greedyTrace(t, m, prompt, n)
			if !slices.Equal(toks, wantToks) {
				t.Fatalf("tokens %v, unpacked resident %v", toks, wantToks)
			}
			sameBits(t, mode.String(), logits, wantLogits)
			st := store.Meter().Stats()
			if st.Misses == 0 || st.Reads == 0 {
				t.Fatalf("no expert was read (stats %+v); the test does not exercise streaming", st)
			}
		})
	}
}

// rewriteGGUF copies the GGUF at in to a new file with the metadata edited
// by edit (which returns the value to write, or ok=false to drop the key);
// tensors keep their order, alignment and data.
func rewriteGGUF(t *testing.T, in string, edit func(key string, v gguf.Value) (any, bool)) string {
	t.Helper()
	f, err := gguf.Open(in)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	out := filepath.Join(t.TempDir(), "edited.gguf")
	o, err := os.Create(out)
	if err != nil {
		t.Fatal(err)
	}
	defer o.Close()
	w := gguf.NewWriter(o)
	for _, kv := range f.KVs() {
		v, ok := edit(kv.Key, kv.Value)
		if !ok {
			continue
		}
		if err := w.AddKV(kv.Key, v); err != nil {
			t.Fatal(err)
		}
	}
	for _, ti := range f.Tensors() {
		if err := w.AddTensor(ti.Name, ti.Type, ti.Dims); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.WriteHeader(); err != nil {
		t.Fatal(err)
	}
	for _, ti := range f.Tensors() {
		if err := w.WriteTensorData(ti.Name, io.NewSectionReader(f.ReaderAt(), f.TensorOffset(ti), ti.Size)); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return out
}

// TestPackedInconsistentMetadata checks that a packed file whose les.pack
// metadata disagrees with its tensors or with the model fails to load with
// a one-line error naming the problem, resident and through the store.
func TestPackedInconsistentMetadata(t *testing.T) {
	_, packed := packInto(t)
	key := func(layer int, suffix string) string {
		return fmt.Sprintf("%s%d%s", pack.KeyLayerPrefix, layer, suffix)
	}
	cases := []struct {
		name string
		edit func(string, gguf.Value) (any, bool)
		want string
	}{
		{"stride", func(k string, v gguf.Value) (any, bool) {
			if k == key(0, pack.SuffixStride) {
				u, _ := v.Uint()
				return u + pack.Alignment, true
			}
			return v, true
		}, "disagrees with les.pack.blk.0"},
		{"experts", func(k string, v gguf.Value) (any, bool) {
			if k == key(1, pack.SuffixExperts) {
				u, _ := v.Uint()
				return uint32(u - 1), true
			}
			return v, true
		}, "les.pack.blk.1.experts"},
		{"layers", func(k string, v gguf.Value) (any, bool) {
			if k == pack.KeyLayers {
				ls, _ := v.Int32s()
				return ls[:len(ls)-1], true
			}
			return v, true
		}, "no expert blobs for layer"},
		{"version", func(k string, v gguf.Value) (any, bool) {
			if k == pack.KeyVersion {
				return uint32(pack.Version + 1), true
			}
			return v, true
		}, "pack format version"},
		{"no-layer-list", func(k string, v gguf.Value) (any, bool) { return v, k != pack.KeyLayers }, pack.KeyLayers},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			bad := rewriteGGUF(t, packed, tc.edit)
			for _, viaStore := range []bool{false, true} {
				opts := Options{Threads: 1}
				called := false
				if viaStore {
					opts.Experts = func(f *gguf.File, shapes []moe.LayerShape) (moe.Source, error) {
						called = true
						return expert.Open(bad, f, shapes, "", expert.Options{Mode: expert.Scheduled, Budget: 1 << 30})
					}
				}
				m, err := Load(bad, opts)
				if err == nil {
					m.Close()
					t.Fatalf("store=%v: a packed file with a bad %s loaded", viaStore, tc.name)
				}
				msg := err.Error()
				t.Logf("store=%v: %s", viaStore, msg)
				if !strings.Contains(msg, tc.want) || strings.Contains(msg, "\n") {
					t.Errorf("store=%v: error %q, want one line containing %q", viaStore, msg, tc.want)
				}
				if !errors.Is(err, ErrUnsupported) {
					t.Errorf("store=%v: error %v is not ErrUnsupported", viaStore, err)
				}
				if called {
					t.Errorf("store=%v: the expert factory ran on an inconsistent file", viaStore)
				}
			}
		})
	}
}
