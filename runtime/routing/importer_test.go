package routing

import (
	"encoding/binary"
	"fmt"
	"strings"
	"testing"

	"github.com/lesfarm/lesfarm/runtime/expert"
)

// npyBytes writes a version-1 .npy of dtype descr and shape with the given
// int16 values.
func npyBytes(descr, shape string, vals []int16) []byte {
	h := fmt.Sprintf("{'descr': '%s', 'fortran_order': False, 'shape': %s, }", descr, shape)
	for (10+len(h)+1)%64 != 0 {
		h += " "
	}
	h += "\n"
	b := []byte("\x93NUMPY\x01\x00")
	b = binary.LittleEndian.AppendUint16(b, uint16(len(h)))
	b = append(b, h...)
	for _, v := range vals {
		b = binary.LittleEndian.AppendUint16(b, uint16(v))
	}
	return b
}

func TestParseNPY(t *testing.T) {
	t.Parallel()
	// 3 tokens, 2 layers, top-2.
	vals := []int16{0, 1, 2, 3, 1, 0, 3, 4, 5, 6, 7, 0}
	r, err := ParseNPY(npyBytes("<i2", "(3, 2, 2)", vals))
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Experts) != 3 || r.Layers != 2 || r.TopK != 2 || r.Experts[1][1][0] != 3 || r.Experts[2][1][1] != 0 {
		t.Fatalf("parsed %+v", r)
	}
	tm := expert.TraceModel{Arch: "qwen3moe", ExpertsUsed: 2, Layers: []expert.TraceLayer{{Experts: 8, ExpertBytes: 10}, {Experts: 8, ExpertBytes: 10}}}
	tf, err := ToTrace(r, tm)
	if err != nil {
		t.Fatal(err)
	}
	seqs := FromTrace(tf)
	if len(seqs) != 1 || len(seqs[0]) != 3 {
		t.Fatalf("trace reads back as %d sequences", len(seqs))
	}
	st, err := Compute(seqs, 2, 8)
	if err != nil {
		t.Fatal(err)
	}
	// Layer 0: {0,1} {0,1} {5,6}: reuse (1 + 0) / 2.
	if st.Layers[0].Reuse != 0.5 {
		t.Errorf("layer 0 reuse %v, want 0.5", st.Layers[0].Reuse)
	}
}

func TestParseNPYBadInput(t *testing.T) {
	t.Parallel()
	good := npyBytes("<i2", "(2, 1, 2)", []int16{0, 1, 2, 3})
	tests := []struct {
		name string
		data []byte
		want string
	}{
		{"not npy", []byte("hello world"), "byte 0"},
		{"truncated data", good[:len(good)-1], "truncated"},
		{"truncated header", good[:20], "truncated header"},
		{"wrong dtype", npyBytes("<f4", "(2, 1, 2)", []int16{0, 1, 2, 3}), "dtype '<f4'"},
		{"wrong rank", npyBytes("<i2", "(4, 1)", []int16{0, 1, 2, 3}), "rank 3"},
		{"negative id", npyBytes("<i2", "(1, 1, 2)", []int16{0, -1}), "negative expert id"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := ParseNPY(tt.data)
			if err == nil || !strings.Contains(err.Error(), tt.want) || strings.Contains(err.Error(), "\n") {
				t.Fatalf("err = %v, want one line containing %q", err, tt.want)
			}
		})
	}
}

func TestParseMegatron(t *testing.T) {
	t.Parallel()
	in := `{"step": 0, "layer": 0, "top_indices": [[0, 1], [1, 2]]}
{"step": 0, "layer": 1, "top_indices": [[3, 4], [4, 5]]}

{"step": 1, "layer": 1, "top_indices": [[6, 7]]}
{"step": 1, "layer": 0, "top_indices": [[1, 2]]}
`
	r, err := ParseMegatron(strings.NewReader(in))
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Experts) != 3 || r.Layers != 2 || r.TopK != 2 || r.Experts[2][1][0] != 6 {
		t.Fatalf("parsed %+v", r)
	}
}

func TestParseMegatronBadInput(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, in, want string
	}{
		{"missing layer", `{"step": 0, "layer": 0, "top_indices": [[0]]}` + "\n" + `{"step": 1, "layer": 1, "top_indices": [[0]]}` + "\n" + `{"step": 0, "layer": 1, "top_indices": [[0]]}`, "line 2: step 1 has no layer 0"},
		{"negative id", `{"step": 0, "layer": 0, "top_indices": [[0, -3]]}`, "line 1: token 0: expert id -3"},
		{"not json", `{"step": 0,`, "line 1"},
		{"no fields", `{"foo": 1}`, "line 1: need step"},
		{"ragged top-k", `{"step": 0, "layer": 0, "top_indices": [[0, 1], [2]]}`, "token 1 has 1 experts"},
		{"token counts differ", `{"step": 0, "layer": 0, "top_indices": [[0]]}` + "\n" + `{"step": 0, "layer": 1, "top_indices": [[0], [1]]}`, "layer 1 has 2 tokens"},
		{"duplicate layer", `{"step": 0, "layer": 0, "top_indices": [[0]]}` + "\n" + `{"step": 0, "layer": 0, "top_indices": [[0]]}`, "line 2: step 0 has layer 0 twice"},
		{"empty", "", "no routing records"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := ParseMegatron(strings.NewReader(tt.in))
			if err == nil || !strings.Contains(err.Error(), tt.want) || strings.Contains(err.Error(), "\n") {
				t.Fatalf("err = %v, want one line containing %q", err, tt.want)
			}
		})
	}
}

func TestToTraceRejectsGeometry(t *testing.T) {
	t.Parallel()
	r := &Routed{Layers: 2, TopK: 2, Experts: [][][]int{{{0, 1}, {2, 9}}}}
	layer := expert.TraceLayer{Experts: 8, ExpertBytes: 10}
	tests := []struct {
		name string
		tm   expert.TraceModel
		want string
	}{
		{"layers", expert.TraceModel{ExpertsUsed: 2, Layers: []expert.TraceLayer{layer}}, "2 MoE layers, the model has 1"},
		{"top-k", expert.TraceModel{ExpertsUsed: 4, Layers: []expert.TraceLayer{layer, layer}}, "top-2, the model routes top-4"},
		{"expert id", expert.TraceModel{ExpertsUsed: 2, Layers: []expert.TraceLayer{layer, layer}}, "token 0 layer 1: expert 9"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := ToTrace(r, tt.tm)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("err = %v, want %q", err, tt.want)
			}
		})
	}
}

func FuzzParseNPY(f *testing.F) {
	f.Add(npyBytes("<i2", "(2, 1, 2)", []int16{0, 1, 2, 3}))
	f.Add(npyBytes("<i2", "(0, 3, 8)", nil))
	f.Add([]byte("\x93NUMPY\x02\x00\xff\xff\xff\x7f"))
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := ParseNPY(b)
		if err != nil {
			return
		}
		for _, tok := range r.Experts {
			if len(tok) != r.Layers {
				t.Fatalf("token with %d layers of %d", len(tok), r.Layers)
			}
		}
	})
}

func FuzzParseMegatron(f *testing.F) {
	f.Add(`{"step": 0, "layer": 0, "top_indices": [[0, 1]]}`)
	f.Add(`{"step": 0, "layer": 1, "top_indices": [[0]]}` + "\n" + `{"step": 0, "layer": 0, "top_indices": [[5]]}`)
	f.Fuzz(func(t *testing.T, s string) {
		r, err := ParseMegatron(strings.NewReader(s))
		if err != nil {
			return
		}
		for _, tok := range r.Experts {
			if len(tok) != r.Layers {
				t.Fatalf("token with %d layers of %d", len(tok), r.Layers)
			}
		}
		if _, err := ToTrace(r, GuessModel(r, 0)); err != nil {
			t.Fatalf("a parsed trace does not convert with its own geometry: %v", err)
		}
	})
}
