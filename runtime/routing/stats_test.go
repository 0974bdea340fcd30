package routing

import (
	"encoding/json"
	"math"
	"strings"
	"testing"

	"github.com/lesfarm/lesfarm/runtime/expert"
)

// seq builds a one-layer sequence from per-token expert sets.
func seq(sets ...[]int) Sequence {
	s := make(Sequence, len(sets))
	for i, x := range sets {
		s[i] = Token{Selected: [][]int{x}}
	}
	return s
}

func near(a, b float64) bool { return math.Abs(a-b) < 1e-9 }

func TestComputeMetrics(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name                  string
		seqs                  []Sequence
		experts               int
		reuse, window, verify float64
		top10, entropy        float64
		precision, recall     float64
	}{
		{
			name: "same experts every token", seqs: []Sequence{seq([]int{0, 1}, []int{0, 1}, []int{0, 1}, []int{0, 1})},
			experts: 10, reuse: 1, window: 1, verify: 1, top10: 0.5, entropy: math.Log(2) / math.Log(10),
			precision: math.NaN(), recall: math.NaN(),
		},
		{
			name: "disjoint experts", seqs: []Sequence{seq([]int{0, 1}, []int{2, 3}, []int{4, 5}, []int{6, 7})},
			experts: 8, reuse: 0, window: 0, verify: 4, top10: 0.125, entropy: 1,
			precision: math.NaN(), recall: math.NaN(),
		},
		{
			// t1 reuses 1 of 2 from t0; t2 reuses 0 from t1 but 2 of 2 within the window.
			name: "window sees further back", seqs: []Sequence{seq([]int{0, 1}, []int{1, 2}, []int{0, 1}, []int{3, 4})},
			experts: 10, reuse: (0.5 + 0.5 + 0) / 3, window: (0.5 + 1 + 0) / 3, verify: 5.0 / 2, top10: 3.0 / 8, entropy: -(0.25*math.Log(0.25) + 0.375*math.Log(0.375) + 3*0.125*math.Log(0.125)) / math.Log(10),
			precision: math.NaN(), recall: math.NaN(),
		},
		{
			name: "reuse does not cross sequences", seqs: []Sequence{seq([]int{0}), seq([]int{0})},
			experts: 10, reuse: math.NaN(), window: math.NaN(), verify: math.NaN(), top10: 1, entropy: 0,
			precision: math.NaN(), recall: math.NaN(),
		},
		{
			name: "predictions", seqs: []Sequence{{
				{Selected: [][]int{{0, 1}}, Predicted: [][]int{{0, 2, 3}}},
				{Selected: [][]int{{4, 5}}, Predicted: [][]int{{4, 5}}},
			}},
			experts: 10, reuse: 0, window: 0, verify: math.NaN(), top10: 0.25, entropy: math.Log(4) / math.Log(10),
			precision: 3.0 / 5, recall: 3.0 / 4,
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
			for _, c := range []struct {
				what      string
				got, want float64
			}{
				{"reuse", m.Reuse, tt.reuse}, {"reuse window", m.ReuseWindow, tt.window}, {"verify", m.VerifyMultiple, tt.verify},
				{"top10", m.Top10Share, tt.top10}, {"entropy", m.Entropy, tt.entropy},
				{"precision", m.Precision, tt.precision}, {"recall", m.Recall, tt.recall},
			} {
				if !(near(c.got, c.want) || math.IsNaN(c.got) && math.IsNaN(c.want)) {
					t.Errorf("%s = %v, want %v", c.what, c.got, c.want)
				}
			}
			if _, err := json.Marshal(st); err != nil {
				t.Errorf("json: %v", err)
			}
		})
	}
}

func TestComputeRejectsBadInput(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		seqs    []Sequence
		layers  int
		experts int
		want    string
	}{
		{"expert out of range", []Sequence{seq([]int{12})}, 1, 10, "expert 12 of 10"},
		{"too many layers", []Sequence{{{Selected: [][]int{{0}, {0}}}}}, 1, 10, "2 layers"},
		{"nothing routed", []Sequence{seq(nil)}, 1, 10, "no layer"},
		{"no experts", nil, 1, 0, "at least one"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := Compute(tt.seqs, tt.layers, tt.experts)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("err = %v, want it to contain %q", err, tt.want)
			}
		})
	}
}

func TestFromTrace(t *testing.T) {
	t.Parallel()
	tf := &expert.TraceFile{Model: expert.TraceModel{Arch: "qwen3moe", ExpertsUsed: 2, Layers: []expert.TraceLayer{{Experts: 8, ExpertBytes: 1}, {Experts: 8, ExpertBytes: 1}}}}
	call := func(l int, pre bool, e ...int) expert.TraceCall {
		return expert.TraceCall{Layer: l, Experts: e, Prefetch: pre}
	}
	tf.Trace.Calls = []expert.TraceCall{
		call(0, false, 0, 1, 2, 3), call(1, false, 0, 1, 2), // prefill: skipped
		call(0, true, 0, 1), call(0, false, 0, 1), call(1, true, 2, 3), call(1, false, 3, 4),
		call(0, false, 0, 5), call(1, false, 4, 6),
	}
	seqs := FromTrace(tf)
	if len(seqs) != 1 || len(seqs[0]) != 2 {
		t.Fatalf("got %d sequences (%v), want one of 2 tokens", len(seqs), seqs)
	}
	st, err := Compute(seqs, 2, 8)
	if err != nil {
		t.Fatal(err)
	}
	if got := st.Layers[1].Recall; !near(got, 0.5) {
		t.Errorf("layer 1 recall %v, want 1/2 (one of the predicted token's 2 was predicted; the other token has no prediction)", got)
	}
	if got := st.Layers[0].Reuse; !near(got, 0.5) {
		t.Errorf("layer 0 reuse %v, want 0.5", got)
	}
}
