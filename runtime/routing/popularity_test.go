package routing

import (
	"encoding/json"
	"math"
	"math/rand/v2"
	"strings"
	"testing"
)

// gen builds a one-layer sequence of n tokens whose i-th token uses f(i).
func gen(n int, f func(i int) []int) Sequence {
	s := make(Sequence, n)
	for i := range s {
		s[i] = Token{Selected: [][]int{f(i)}}
	}
	return s
}

func TestPopularityFiniteSample(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(1, 2))
	uniform := gen(584, func(int) []int { return rng.Perm(256)[:8] })
	tests := []struct {
		name    string
		seqs    []Sequence
		experts int
		// want* are exact; lo/hi bound the others.
		wantTop, wantHeldOut     float64
		evenLo, evenHi           float64
		heldOutLo, heldOutHi     float64
		topLo, topHi             float64
		heldOutNaN, checkHeldOut bool
	}{
		{
			// Expert 0 in every token: a preference that persists, so
			// the held-out share is the whole share.
			name: "persistent favourite", experts: 10,
			seqs:    []Sequence{gen(2*PopularityBlock, func(i int) []int { return []int{0, 1 + i%9} })},
			wantTop: 0.5, wantHeldOut: 0.5, checkHeldOut: true, evenLo: 0.25, evenHi: 0.5,
		},
		{
			// One expert per half: the whole share is chance (each half's
			// favourite never appears in the other), and relabelled blocks
			// read at least as much.
			name: "favourite by chance", experts: 10,
			seqs:    []Sequence{gen(2*PopularityBlock, func(i int) []int { return []int{i / PopularityBlock} })},
			wantTop: 0.5, wantHeldOut: 0, checkHeldOut: true, evenLo: 0.5, evenHi: 0.6,
		},
		{
			name: "one block: no held-out share", experts: 8,
			seqs:    []Sequence{gen(PopularityBlock, func(i int) []int { return []int{i % 8} })},
			wantTop: 0.125, heldOutNaN: true, evenLo: 0.125, evenHi: 0.125,
		},
		{
			// Uniform top-8 of 256 on 584 tokens (18 demands per expert):
			// the plain share reads well above the even 25/256, the
			// held-out one near it, and relabelling reproduces the excess.
			name: "uniform routing, few demands per expert", experts: 256, seqs: []Sequence{uniform},
			wantTop: math.NaN(), topLo: 0.13, topHi: 0.16,
			heldOutLo: 0.088, heldOutHi: 0.108, evenLo: 0.13, evenHi: 0.16,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			st, err := Compute(tt.seqs, 1, tt.experts)
			if err != nil {
				t.Fatal(err)
			}
			m := st.Overall
			if !math.IsNaN(tt.wantTop) && !near(m.Top10Share, tt.wantTop) {
				t.Errorf("top-10%% share %v, want %v", m.Top10Share, tt.wantTop)
			}
			if math.IsNaN(tt.wantTop) && (m.Top10Share < tt.topLo || m.Top10Share > tt.topHi) {
				t.Errorf("top-10%% share %v, want it in [%v, %v]", m.Top10Share, tt.topLo, tt.topHi)
			}
			switch {
			case tt.heldOutNaN:
				if !math.IsNaN(m.Top10HeldOut) {
					t.Errorf("held-out share %v on one block, want NaN", m.Top10HeldOut)
				}
				b, err := json.Marshal(m)
				if err != nil || !strings.Contains(string(b), `"top10_heldout":null`) {
					t.Errorf("json %s (%v), want top10_heldout null", b, err)
				}
			case tt.checkHeldOut:
				if !near(m.Top10HeldOut, tt.wantHeldOut) {
					t.Errorf("held-out share %v, want %v", m.Top10HeldOut, tt.wantHeldOut)
				}
			default:
				if m.Top10HeldOut < tt.heldOutLo || m.Top10HeldOut > tt.heldOutHi {
					t.Errorf("held-out share %v, want it in [%v, %v]", m.Top10HeldOut, tt.heldOutLo, tt.heldOutHi)
				}
			}
			if m.Top10Even < tt.evenLo-1e-9 || m.Top10Even > tt.evenHi+1e-9 {
				t.Errorf("even-routing share %v, want it in [%v, %v]", m.Top10Even, tt.evenLo, tt.evenHi)
			}
		})
	}
}

func TestPrefix(t *testing.T) {
	t.Parallel()
	one := func(n int) Sequence { return gen(n, func(i int) []int { return []int{i % 4} }) }
	seqs := []Sequence{one(3), one(5), one(2)}
	tests := []struct {
		n    int
		want []int // lengths
	}{
		{0, nil}, {2, []int{2}}, {3, []int{3}}, {4, []int{3, 1}}, {10, []int{3, 5, 2}}, {99, []int{3, 5, 2}},
	}
	for _, tt := range tests {
		var got []int
		for _, s := range Prefix(seqs, tt.n) {
			got = append(got, len(s))
		}
		if len(got) != len(tt.want) {
			t.Errorf("Prefix(%d) lengths %v, want %v", tt.n, got, tt.want)
			continue
		}
		for i := range got {
			if got[i] != tt.want[i] {
				t.Errorf("Prefix(%d) lengths %v, want %v", tt.n, got, tt.want)
				break
			}
		}
	}
}
