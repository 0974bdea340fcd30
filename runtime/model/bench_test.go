package model

import (
	"context"
	"testing"

	"github.com/lesfarm/lesfarm/runtime/trace"
)

// BenchmarkDecode measures single-token decode of the golden Q4_K_M model
// (owned copy), one thread.
func BenchmarkDecode(b *testing.B) {
	m, err := Load("testdata/tiny-qwen3moe-q4_k_m.gguf", Options{Threads: 1})
	if err != nil {
		b.Fatal(err)
	}
	defer m.Close()
	st, err := m.NewState(256)
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	tok := []int{42}
	b.ReportAllocs()
	n := 0
	for b.Loop() {
		if st.Pos() >= 256 {
			st.Reset()
		}
		if _, err := st.Forward(ctx, tok, false); err != nil {
			b.Fatal(err)
		}
		n++
	}
	b.ReportMetric(float64(n)/b.Elapsed().Seconds(), "tok/s")
}

// BenchmarkPrefill64 measures a 64-token batched prefill, one thread.
func BenchmarkPrefill64(b *testing.B) {
	m, err := Load("testdata/tiny-qwen3moe-q4_k_m.gguf", Options{Threads: 1})
	if err != nil {
		b.Fatal(err)
	}
	defer m.Close()
	st, err := m.NewState(64)
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	toks := make([]int, 64)
	for i := range toks {
		toks[i] = (i*131 + 7) % m.Vocab
	}
	b.ReportAllocs()
	n := 0
	for b.Loop() {
		st.Reset()
		if _, err := st.Forward(ctx, toks, false); err != nil {
			b.Fatal(err)
		}
		n += len(toks)
	}
	b.ReportMetric(float64(n)/b.Elapsed().Seconds(), "tok/s")
}

type nopSink struct{ n int }

func (s *nopSink) Token(*trace.TokenEvent) { s.n++ }
func (s *nopSink) Layer(*trace.LayerEvent) { s.n++ }
func (s *nopSink) Read(*trace.ReadEvent)   { s.n++ }

// BenchmarkDecodeTraced is BenchmarkDecode with a sink attached: the
// difference is the cost of LayerEvent emission (it must stay 0 allocs).
func BenchmarkDecodeTraced(b *testing.B) {
	m, err := Load("testdata/tiny-qwen3moe-q4_k_m.gguf", Options{Threads: 1})
	if err != nil {
		b.Fatal(err)
	}
	defer m.Close()
	st, err := m.NewState(256)
	if err != nil {
		b.Fatal(err)
	}
	st.Sink = &nopSink{}
	ctx := context.Background()
	tok := []int{42}
	b.ReportAllocs()
	for b.Loop() {
		if st.Pos() >= 256 {
			st.Reset()
		}
		if _, err := st.Forward(ctx, tok, false); err != nil {
			b.Fatal(err)
		}
	}
}
