package routing

import (
	"encoding/json"
	"math"
	"math/rand/v2"
	"sort"
)

// Popularity on a finite text. Top10Share ranks the experts and reads their
// share on the same demands, so experts that were used often by chance
// count as popular: with d demands per expert, routing that is even in
// expectation reads roughly 0.1·(1 + 1.75/√d) and more when demands come in
// runs (reuse), e.g. about 0.2 with 256 experts, top-8, the fine-grained
// targets' reuse and a few hundred tokens. Two figures beside it say how
// much of a share is the text's length:
//
//   - Top10HeldOut ranks on one half of the tokens and reads the share on
//     the other (alternating blocks of PopularityBlock tokens, both ways).
//     Chance does not carry over from one half to the other, so even
//     routing reads about the even share at any length, and a real
//     preference is approached from below as the text grows.
//   - Top10Even is what routing with no preferred expert reads on the same
//     tokens with the same locality: the measured demands relabelled, each
//     block of PopularityBlock tokens by its own random permutation of the
//     experts, averaged over EvenDraws relabellings.

// PopularityBlock is the block length, in tokens, of Top10HeldOut's halves
// and of Top10Even's relabelling: long against the reuse window, so little
// locality crosses a block boundary.
const PopularityBlock = 64

// EvenDraws is how many relabellings Top10Even averages.
const EvenDraws = 16

// popularityOf sets m's Entropy, EffectiveExperts, Top10Share,
// Top10HeldOut and Top10Even from one layer's demands: sel[i] is the i-th
// routed token's experts, in text order (sequences concatenated).
func popularityOf(m *Metrics, sel [][]int, experts, layer int) {
	all := make([]int64, experts)
	half := [2][]int64{make([]int64, experts), make([]int64, experts)}
	for i, s := range sel {
		h := half[(i/PopularityBlock)%2]
		for _, e := range s {
			all[e]++
			h[e]++
		}
	}
	m.Entropy, m.EffectiveExperts, m.Top10Share = popularity(all)
	m.Top10HeldOut = (heldOut(half[0], half[1]) + heldOut(half[1], half[0])) / 2
	m.Top10Even = evenTop10(sel, experts, layer)
}

// topExperts returns the most used 10% of experts by counts (at least
// one), ties broken by the lower index.
func topExperts(counts []int64) []int {
	idx := make([]int, len(counts))
	for i := range idx {
		idx[i] = i
	}
	sort.SliceStable(idx, func(a, b int) bool { return counts[idx[a]] > counts[idx[b]] })
	return idx[:max(1, len(idx)/10)]
}

// heldOut returns the share of test's demands taken by the top 10% of
// experts ranked by rank; NaN when either has no demand.
func heldOut(rank, test []int64) float64 {
	var nr, nt, top int64
	for e := range rank {
		nr += rank[e]
		nt += test[e]
	}
	if nr == 0 || nt == 0 {
		return math.NaN()
	}
	for _, e := range topExperts(rank) {
		top += test[e]
	}
	return float64(top) / float64(nt)
}

// evenTop10 returns the mean top-10% share of sel over EvenDraws
// relabellings, each block of PopularityBlock tokens by its own random
// permutation of the experts (seeded by the layer, so it is
// reproducible).
func evenTop10(sel [][]int, experts, layer int) float64 {
	rng := rand.New(rand.NewPCG(uint64(layer), 0x6576656e))
	counts := make([]int64, experts)
	perm := make([]int, experts)
	var sum float64
	for range EvenDraws {
		clear(counts)
		for i, s := range sel {
			if i%PopularityBlock == 0 {
				for j := range perm {
					perm[j] = j
				}
				rng.Shuffle(len(perm), func(a, b int) { perm[a], perm[b] = perm[b], perm[a] })
			}
			for _, e := range s {
				counts[perm[e]]++
			}
		}
		_, _, top := popularity(counts)
		sum += top
	}
	return sum / EvenDraws
}

// Prefix returns the first n tokens of seqs, in order (the last sequence
// cut), for measuring how the statistics converge with the text's length.
func Prefix(seqs []Sequence, n int) []Sequence {
	var out []Sequence
	for _, s := range seqs {
		if n <= 0 {
			break
		}
		s = s[:min(len(s), n)]
		out = append(out, s)
		n -= len(s)
	}
	return out
}

// Point is the popularity of a text's first Tokens tokens (the mean over
// the layers with experts, as Stats.Overall).
type Point struct {
	Tokens       int     `json:"tokens"`
	Demands      float64 `json:"demands_per_expert"`
	Top10Share   float64 `json:"top10_share"`
	Top10HeldOut float64 `json:"top10_heldout"`
	Top10Even    float64 `json:"top10_even"`
	Entropy      float64 `json:"entropy"`
}

// Converge returns the popularity of the first n tokens of seqs for each n
// in ns below the total, then of all tokens: how Top10Share and Entropy
// move towards their values on an unbounded text, with the held-out and
// even-routing shares beside them.
func Converge(seqs []Sequence, layers, experts int, ns []int) ([]Point, error) {
	total := 0
	for _, s := range seqs {
		total += len(s)
	}
	var out []Point
	for _, n := range append(append([]int(nil), ns...), total) {
		if n <= 0 || n > total || n == total && len(out) > 0 && out[len(out)-1].Tokens == total {
			continue
		}
		st, err := Compute(Prefix(seqs, n), layers, experts)
		if err != nil {
			return nil, err
		}
		o := st.Overall
		out = append(out, Point{Tokens: n, Demands: float64(n*st.TopK) / float64(experts), Top10Share: o.Top10Share,
			Top10HeldOut: o.Top10HeldOut, Top10Even: o.Top10Even, Entropy: o.Entropy})
	}
	return out, nil
}

// MarshalJSON writes a NaN held-out share (too few tokens) as null.
func (p Point) MarshalJSON() ([]byte, error) {
	type plain Point
	return json.Marshal(struct {
		plain
		HeldOut *float64 `json:"top10_heldout"`
	}{plain(p), num(p.Top10HeldOut)})
}
