package model

import (
	"context"
	"os"
	"runtime"
	"strconv"
	"testing"

	"github.com/lesfarm/lesfarm/runtime/internal/cputime"
)

// BenchmarkPhonePrefill64 and BenchmarkPhoneDecode run a model named by
// LESFARM_BENCH_MODEL (e.g. the phone-shaped synth model), on
// LESFARM_BENCH_THREADS threads (default one). cpu-tok/s counts tokens per
// CPU-second of the benchmark's thread (at one thread the forward pass runs
// on it), which a loaded machine disturbs less than tok/s.
func phoneModel(b *testing.B) *Model {
	p := os.Getenv("LESFARM_BENCH_MODEL")
	if p == "" {
		b.Skip("LESFARM_BENCH_MODEL not set")
	}
	threads := 1
	if v := os.Getenv("LESFARM_BENCH_THREADS"); v != "" {
		t, err := strconv.Atoi(v)
		if err != nil || t < 1 {
			b.Fatalf("LESFARM_BENCH_THREADS=%q: want a positive integer", v)
		}
		threads = t
	}
	m, err := Load(p, Options{Threads: threads})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { m.Close() })
	return m
}

func BenchmarkPhonePrefill64(b *testing.B) {
	m := phoneModel(b)
	st, err := m.NewState(64)
	if err != nil {
		b.Fatal(err)
	}
	toks := make([]int, 64)
	for i := range toks {
		toks[i] = (i*131 + 7) % m.Vocab
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	b.ReportAllocs()
	cpu0 := cputime.Thread()
	n := 0
	for b.Loop() {
		st.Reset()
		if _, err := st.Forward(context.Background(), toks, false); err != nil {
			b.Fatal(err)
		}
		n += 64
	}
	b.ReportMetric(float64(n)/b.Elapsed().Seconds(), "tok/s")
	if cpu := (cputime.Thread() - cpu0).Seconds(); cpu > 0 {
		b.ReportMetric(float64(n)/cpu, "cpu-tok/s")
	}
}

func BenchmarkPhoneDecode(b *testing.B) {
	m := phoneModel(b)
	st, err := m.NewState(256)
	if err != nil {
		b.Fatal(err)
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	b.ReportAllocs()
	cpu0 := cputime.Thread()
	n := 0
	for b.Loop() {
		if st.Pos() >= 256 {
			st.Reset()
		}
		if _, err := st.Forward(context.Background(), []int{(n*131 + 7) % m.Vocab}, false); err != nil {
			b.Fatal(err)
		}
		n++
	}
	b.ReportMetric(float64(n)/b.Elapsed().Seconds(), "tok/s")
	if cpu := (cputime.Thread() - cpu0).Seconds(); cpu > 0 {
		b.ReportMetric(float64(n)/cpu, "cpu-tok/s")
	}
}
