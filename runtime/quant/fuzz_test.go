package quant

import (
	"bytes"
	"strings"
	"testing"

	"github.com/lesfarm/lesfarm/runtime/gguf"
	"github.com/lesfarm/lesfarm/runtime/tensor"
)

// planFile encodes metadata pairs as a GGUF file with no tensors.
func planFile(t testing.TB, kvs []KV) []byte {
	var buf bytes.Buffer
	w := gguf.NewWriter(&buf)
	for _, kv := range kvs {
		if err := w.AddKV(kv.Key, kv.Value); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.WriteHeader(); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// FuzzReadPlan feeds hostile plan metadata (arbitrary part names, type
// names, sizes and array lengths) to ReadPlan: it must return a plan or an
// error, never panic, and a plan it accepts must survive Meta → ReadPlan
// unchanged.
func FuzzReadPlan(f *testing.F) {
	f.Add("blk.0.attention,blk.0.experts,token_embd,output", "Q8_0,Q4_K,F16,Q6_K", int64(1000), float32(0.01), uint64(5000), uint32(1), "knapsack")
	f.Add("blk.-1.experts", "Q8_0", int64(-5), float32(-1), uint64(1)<<63, uint32(2), "")
	f.Add("blk.1.experts,blk.1.experts", "Q2_K,Q3_K", int64(0), float32(0), uint64(0), uint32(1), "x")
	f.Add("other,blk.99999999999.attention", "q5_k,nonsense", int64(7), float32(1e30), uint64(9), uint32(1), "y")
	f.Fuzz(func(t *testing.T, parts, types string, size int64, kl float32, budget uint64, version uint32, method string) {
		ps := strings.Split(parts, ",")
		ts := strings.Split(types, ",")
		bs := make([]int64, len(ps))
		ks := make([]float32, len(ps))
		for i := range bs {
			bs[i], ks[i] = size+int64(i), kl
		}
		if len(ts) > 1 {
			bs = bs[:len(bs)-1] // sometimes mismatched lengths
		}
		b := planFile(t, []KV{{KeyPlanVersion, version}, {KeyPlanBudget, budget}, {KeyPlanMethod, method},
			{KeyPlanParts, ps}, {KeyPlanTypes, ts}, {KeyPlanBytes, bs}, {KeyPlanKL, ks}})
		gf, err := gguf.Parse(bytes.NewReader(b), int64(len(b)))
		if err != nil {
			t.Fatal(err)
		}
		p, err := ReadPlan(gf)
		if err != nil {
			return
		}
		b2 := planFile(t, p.Meta())
		gf2, err := gguf.Parse(bytes.NewReader(b2), int64(len(b2)))
		if err != nil {
			t.Fatal(err)
		}
		p2, err := ReadPlan(gf2)
		if err != nil {
			t.Fatalf("re-encoded plan rejected: %v", err)
		}
		if len(p2.Items) != len(p.Items) || p2.Budget != p.Budget || p2.Method != p.Method {
			t.Fatalf("round trip changed the plan: %+v vs %+v", p2, p)
		}
		for i := range p.Items {
			a, c := p.Items[i], p2.Items[i]
			if a.Layer != c.Layer || a.Part != c.Part || a.Type != c.Type || a.Bytes != c.Bytes {
				t.Fatalf("part %d: %+v vs %+v", i, a, c)
			}
		}
	})
}

// FuzzReadPlanBytes parses arbitrary bytes as a GGUF file and reads a plan
// from whatever metadata it has.
func FuzzReadPlanBytes(f *testing.F) {
	p := &Plan{Budget: 100, Method: "m", Items: []Choice{{Layer: 0, Part: PartExperts, Type: tensor.Q4_K, Bytes: 10, Sensitivity: 0.5}, {Layer: -1, Part: PartOutput, Type: tensor.Q8_0, Bytes: 20}}}
	f.Add(planFile(f, p.Meta()))
	f.Add([]byte("GGUF"))
	f.Fuzz(func(t *testing.T, b []byte) {
		gf, err := gguf.Parse(bytes.NewReader(b), int64(len(b)))
		if err != nil {
			return
		}
		_, _ = ReadPlan(gf)
	})
}
