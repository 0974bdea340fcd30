package sample

import (
	"testing"
)

func TestArgmaxTiesToLowestID(t *testing.T) {
	tests := []struct {
		logits []float32
		want   int
	}{
		{[]float32{1, 3, 3, 2}, 1},
		{[]float32{5}, 0},
		{[]float32{-1, -1, -1}, 0},
		{[]float32{0, 0, 7}, 2},
	}
	for _, tt := range tests {
		if got := Argmax(tt.logits); got != tt.want {
			t.Errorf("Argmax(%v) = %d, want %d", tt.logits, got, tt.want)
		}
	}
}

func TestGreedyIsArgmax(t *testing.T) {
	s, err := New(Params{})
	if err != nil {
		t.Fatal(err)
	}
	if got := s.Sample([]float32{0.1, 2, 1.9}); got != 1 {
		t.Fatalf("greedy = %d, want 1", got)
	}
}

func TestSeedIsDeterministic(t *testing.T) {
	logits := make([]float32, 50)
	for i := range logits {
		logits[i] = float32(i%7) * 0.3
	}
	run := func(seed uint64) []int {
		s, err := New(Params{Temperature: 1, Seed: seed})
		if err != nil {
			t.Fatal(err)
		}
		out := make([]int, 64)
		for i := range out {
			out[i] = s.Sample(logits)
		}
		return out
	}
	a, b, c := run(7), run(7), run(8)
	same := true
	for i := range a {
		if a[i] != b[i] {
			t.Fatalf("same seed diverged at %d: %d vs %d", i, a[i], b[i])
		}
		same = same && a[i] == c[i]
	}
	if same {
		t.Fatal("different seeds gave identical 64-token sequences")
	}
}

func TestTopKAndTopPRestrict(t *testing.T) {
	logits := []float32{0, 1, 2, 3, 4, 5}
	tests := []struct {
		name    string
		p       Params
		allowed map[int]bool
	}{
		{"top-k 2", Params{Temperature: 5, TopK: 2}, map[int]bool{5: true, 4: true}},
		{"top-k 1", Params{Temperature: 5, TopK: 1}, map[int]bool{5: true}},
		// With temperature 0.5 token 5 has p≈0.865, so top-p 0.5 keeps only it.
		{"top-p 0.5", Params{Temperature: 0.5, TopP: 0.5}, map[int]bool{5: true}},
		{"top-p 0.95", Params{Temperature: 0.5, TopP: 0.95}, map[int]bool{5: true, 4: true}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, err := New(tt.p)
			if err != nil {
				t.Fatal(err)
			}
			seen := map[int]bool{}
			for range 2000 {
				id := s.Sample(logits)
				if !tt.allowed[id] {
					t.Fatalf("sampled %d, allowed %v", id, tt.allowed)
				}
				seen[id] = true
			}
			if len(seen) != len(tt.allowed) {
				t.Fatalf("saw %v in 2000 draws, want all of %v", seen, tt.allowed)
			}
		})
	}
}

func TestTemperatureDistribution(t *testing.T) {
	// logits ln(1), ln(3): probabilities 0.25 / 0.75 at temperature 1.
	s, err := New(Params{Temperature: 1, Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	logits := []float32{0, 1.0986123}
	n, ones := 20000, 0
	for range n {
		ones += s.Sample(logits)
	}
	if f := float64(ones) / float64(n); f < 0.73 || f > 0.77 {
		t.Fatalf("P(token 1) = %.3f, want 0.75±0.02", f)
	}
}

func TestValidate(t *testing.T) {
	for _, p := range []Params{{Temperature: -1}, {TopK: -2}, {TopP: 1.5}} {
		if _, err := New(p); err == nil {
			t.Errorf("New(%+v) accepted invalid params", p)
		}
	}
}

func BenchmarkSampleTopK(b *testing.B) {
	logits := make([]float32, 32000)
	for i := range logits {
		logits[i] = float32(i%101) * 0.01
	}
	s, _ := New(Params{Temperature: 0.8, TopK: 40, TopP: 0.95, Seed: 1})
	b.ReportAllocs()
	for b.Loop() {
		s.Sample(logits)
	}
}
