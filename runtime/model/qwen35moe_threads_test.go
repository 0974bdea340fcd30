package model

import (
	"context"
	"math"
	"testing"

	"github.com/lesfarm/lesfarm/runtime/tensor"
)

// TestQwen35ThreadsBitIdentical: with 2 and 3 threads (experts split by
// whole expert between the threads with the shared expert among them, the
// conv and gates split by channel and position), a prefill and the decode
// steps after it give the 1-thread logits bit for bit, on quantized
// weights (the F32 model of TestQwen35BatchMatchesStep takes the serial
// expert path).
func TestQwen35ThreadsBitIdentical(t *testing.T) {
	ctx := context.Background()
	path := tinyQwen35File(t, defaultTinyQwen35(tensor.Q4_K))
	prompt := make([]int, 37)
	for i := range prompt {
		prompt[i] = (i*71 + 5) % 512
	}
	run := func(threads int) [][]float32 {
		m, err := Load(path, Options{Threads: threads})
		if err != nil {
			t.Fatal(err)
		}
		defer m.Close()
		st, err := m.NewState(64)
		if err != nil {
			t.Fatal(err)
		}
		var out [][]float32
		lg, err := st.Forward(ctx, prompt, true)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, append([]float32(nil), lg...))
		for i := range 5 {
			lg, err := st.Forward(ctx, []int{(i*131 + 9) % m.Vocab}, false)
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, append([]float32(nil), lg...))
		}
		return out
	}
	want := run(1)
	for _, threads := range []int{2, 3} {
		got := run(threads)
		for pass := range want {
			for i := range want[pass] {
				if math.Float32bits(got[pass][i]) != math.Float32bits(want[pass][i]) {
					t.Fatalf("%d threads, pass %d, logit %d: %v != 1 thread's %v", threads, pass, i, got[pass][i], want[pass][i])
				}
			}
		}
	}
}
