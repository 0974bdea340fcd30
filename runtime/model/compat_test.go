package model

import (
	"context"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	fx "github.com/lesfarm/lesfarm/internal/fixture"
	"github.com/lesfarm/lesfarm/runtime/expert"
	"github.com/lesfarm/lesfarm/runtime/gguf"
	"github.com/lesfarm/lesfarm/runtime/moe"
	"github.com/lesfarm/lesfarm/runtime/pack"
	"github.com/lesfarm/lesfarm/runtime/tensor"
)

// layoutCase is one way of packing a model for TestPackLayoutsExact.
type layoutCase struct {
	name  string
	opts  pack.Options
	reads int // preads per expert the store must plan (0: not checked)
}

var packLayouts = []layoutCase{
	{"blob", pack.Options{}, 1},
	{"compat", pack.Options{Layout: pack.LayoutCompat}, 0}, // 2 (merged) or 3 (split) by architecture
	{"compat-merged", pack.Options{Layout: pack.LayoutCompat, GateUp: pack.GateUpMerged}, 2},
	{"compat-split", pack.Options{Layout: pack.LayoutCompat, GateUp: pack.GateUpSplit}, 3},
}

// TestPackLayoutsExact packs qwen3moe and qwen35moe models in every layout
// and runs them resident and through the LES store in every mode at a
// quarter of the expert bytes: greedy tokens and every step's logits must
// be bit-identical to the unpacked model run resident. The models are the
// owned golden qwen3moe fixture, a synthetic qwen35moe generated here, and
// (when present) the shared qwen35moe fixtures, whose Q4_K_M experts need
// FFN padding in the compat layout.
func TestPackLayoutsExact(t *testing.T) {
	c := fixtureQwen35(tensor.Q8_0)
	c.Layers = 4
	synth := writeSynth(t, c)
	models := []struct{ name, path string }{
		{"qwen3moe-q4km", fixture(t, packedFixture)},
		{"qwen35moe-synth-q8", synth},
	}
	for _, rel := range []string{"qwen35moe/tiny-qwen35moe-q4_k_m.gguf"} {
		if testing.Short() {
			break
		}
		models = append(models, struct{ name, path string }{filepath.Base(rel), rel}) // resolved in its subtest
	}
	prompt := []int{1, 2, 3, 4, 5}
	const n = 8
	for _, mdl := range models {
		t.Run(mdl.name, func(t *testing.T) {
			if strings.HasPrefix(mdl.path, "qwen35moe/") {
				// The shared tier: skips (or fails under require) alone.
				mdl.path = fx.Shared(t, mdl.path, "")
			}
			base, err := Load(mdl.path, Options{Threads: 1})
			if err != nil {
				t.Fatal(err)
			}
			wantToks, wantLogits := greedyTrace(t, base, prompt, n)
			base.Close()
			for _, lc := range packLayouts {
				t.Run(lc.name, func(t *testing.T) {
					out := filepath.Join(t.TempDir(), "p.gguf")
					if err := pack.Pack(context.Background(), mdl.path, out, lc.opts); err != nil {
						t.Fatal(err)
					}
					m, err := Load(out, Options{Threads: 1})
					if err != nil {
						t.Fatal(err)
					}
					toks, logits := greedyTrace(t, m, prompt, n)
					m.Close()
					if !slices.Equal(toks, wantToks) {
						t.Fatalf("resident: tokens %v, unpacked %v", toks, wantToks)
					}
					sameBits(t, "resident", logits, wantLogits)
					for _, mode := range expert.Modes() {
						var store *expert.Store
						m, err := Load(out, Options{Threads: 1, Experts: func(f *gguf.File, shapes []moe.LayerShape) (moe.Source, error) {
							var total int64
							for _, s := range shapes {
								total += int64(s.Experts) * s.Bytes()
							}
							s, err := expert.Open(out, f, shapes, "", expert.Options{Mode: mode, Budget: total / 4, Workers: 4})
							store = s
							return s, err
						}})
						if err != nil {
							t.Fatalf("%s: %v", mode, err)
						}
						if lc.reads > 0 {
							if got := store.Info().ReadsPerExpert; got != lc.reads {
								t.Errorf("%s: %d preads per expert, want %d", mode, got, lc.reads)
							}
						}
						toks, logits := greedyTrace(t, m, prompt, n)
						st := store.Meter().Stats()
						m.Close()
						if !slices.Equal(toks, wantToks) {
							t.Fatalf("%s: tokens %v, unpacked resident %v", mode, toks, wantToks)
						}
						sameBits(t, mode.String(), logits, wantLogits)
						if st.Misses == 0 || st.Reads == 0 {
							t.Fatalf("%s: no expert was read (stats %+v); streaming not exercised", mode, st)
						}
					}
				})
			}
		})
	}
}
