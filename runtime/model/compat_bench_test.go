package model

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/lesfarm/lesfarm/profile"
	"github.com/lesfarm/lesfarm/runtime/expert"
	"github.com/lesfarm/lesfarm/runtime/gguf"
	"github.com/lesfarm/lesfarm/runtime/moe"
	"github.com/lesfarm/lesfarm/runtime/pack"
	"github.com/lesfarm/lesfarm/runtime/tensor"
)

// BenchmarkPackLayoutRead measures what the compat layout (two aligned
// preads per expert: merged gate+up, then down) costs against the blob
// layout (one pread) when experts stream from storage. The model has the
// 35B-A3B's expert geometry (hidden 2048, FFN 512, Q4_K: 1.77 MB per
// expert, no padding needed) with 64 experts in one layer. Each iteration
// demands 8 cold experts (a top-8 token) from a store of either layout,
// alternating layouts (and which goes first) so both see the same machine
// state, and reports the
// mean time per 8-expert demand of each ("blob-us", "compat-us") and
// their ratio. Storage is an emulated phone (LESFARM_BENCH_PROFILE,
// default phone-flagship), or the real disk with O_DIRECT when
// LESFARM_BENCH_PROFILE=direct.
func BenchmarkPackLayoutRead(b *testing.B) {
	dir := b.TempDir()
	c := SynthPresets["qwen35moe-35b-a3b-scaled"]
	c.Layers, c.Experts, c.NoMTP, c.Vocab, c.Type = 1, 64, true, 512, tensor.Q4_K
	src := filepath.Join(dir, "src.gguf")
	fh, err := os.Create(src)
	if err != nil {
		b.Fatal(err)
	}
	if err := WriteSynthetic(fh, c); err != nil {
		b.Fatal(err)
	}
	fh.Close()
	profName := os.Getenv("LESFARM_BENCH_PROFILE")
	if profName == "" {
		profName = "phone-flagship"
	}
	var prof *expert.Profile
	direct := profName == "direct"
	if !direct {
		if prof, err = profile.Load(profName); err != nil {
			b.Fatal(err)
		}
	}
	type store struct {
		name  string
		s     *expert.Store
		total time.Duration
	}
	var stores []*store
	for _, lay := range []string{pack.LayoutBlob, pack.LayoutCompat} {
		out := filepath.Join(dir, lay+".gguf")
		if err := pack.Pack(context.Background(), src, out, pack.Options{Layout: lay}); err != nil {
			b.Fatal(err)
		}
		f, err := gguf.Open(out)
		if err != nil {
			b.Fatal(err)
		}
		m, err := Load(out, Options{Experts: func(f *gguf.File, shapes []moe.LayerShape) (moe.Source, error) {
			return expert.Open(out, f, shapes, "", expert.Options{Mode: expert.OnDemandParallel, Budget: 16 * shapes[0].Bytes(), Profile: prof, Direct: direct})
		}})
		f.Close()
		if err != nil {
			b.Fatal(err)
		}
		defer m.Close()
		s := m.Experts.(*expert.Store)
		b.Logf("%s: %d preads per expert, direct I/O %v", lay, s.Info().ReadsPerExpert, s.Info().Direct)
		stores = append(stores, &store{name: lay, s: s})
	}
	ok := func(int, moe.Weights) error { return nil }
	experts := make([]int, 8)
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		// 8 experts not among the last 16 demanded: all cold.
		for k := range experts {
			experts[k] = (i*8 + k) % 64
		}
		for j := range stores {
			st := stores[(i+j)%2] // alternate which layout goes first
			start := time.Now()
			if err := st.s.Use(context.Background(), 0, experts, ok); err != nil {
				b.Fatal(err)
			}
			st.total += time.Since(start)
		}
		i++
	}
	for _, st := range stores {
		b.ReportMetric(float64(st.total.Microseconds())/float64(i), st.name+"-us")
	}
	b.ReportMetric(float64(stores[1].total)/float64(stores[0].total), "compat/blob")
}
