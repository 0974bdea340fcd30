package tensor

import (
	"math"
	"math/rand/v2"
	"testing"
)

func TestFloatOps(t *testing.T) {
	r := rand.New(rand.NewPCG(21, 22))
	x := randVec(r, 1001, 1)
	y := randVec(r, 1001, 1)

	var ref float64
	for i := range x {
		ref += float64(x[i]) * float64(y[i])
	}
	if d := math.Abs(float64(Dot(x, y)) - ref); d > 1e-4 {
		t.Errorf("Dot off by %g", d)
	}

	z := append([]float32(nil), y...)
	Axpy(2, x, z)
	for i := range z {
		if z[i] != y[i]+x[i]*2 {
			t.Fatalf("Axpy[%d]", i)
		}
	}

	w := randVec(r, 1001, 1)
	out := make([]float32, len(x))
	RMSNorm(out, x, w, 1e-6)
	var ss float64
	for _, v := range x {
		ss += float64(v) * float64(v)
	}
	s := 1 / math.Sqrt(ss/float64(len(x))+1e-6)
	for i := range out {
		if d := math.Abs(float64(out[i]) - float64(x[i])*s*float64(w[i])); d > 1e-5 {
			t.Fatalf("RMSNorm[%d] off by %g", i, d)
		}
	}

	sm := []float32{1, 2, 3, float32(math.Inf(-1))}
	Softmax(sm)
	e1, e2, e3 := math.Exp(-2), math.Exp(-1), 1.0
	tot := e1 + e2 + e3
	for i, want := range []float64{e1 / tot, e2 / tot, e3 / tot, 0} {
		if math.Abs(float64(sm[i])-want) > 1e-7 {
			t.Errorf("Softmax[%d] = %v, want %v", i, sm[i], want)
		}
	}

	act := []float32{-2, 0, 3}
	SiLU(act, act)
	for i, v := range []float64{-2, 0, 3} {
		if want := v / (1 + math.Exp(-v)); math.Abs(float64(act[i])-want) > 1e-6 {
			t.Errorf("SiLU(%v) = %v, want %v", v, act[i], want)
		}
	}
	g := []float32{1, -1}
	u := []float32{2, 3}
	SwiGLU(g, g, u)
	if math.Abs(float64(g[0])-2/(1+math.Exp(-1))) > 1e-6 || math.Abs(float64(g[1])-3*-1/(1+math.Exp(1))) > 1e-6 {
		t.Errorf("SwiGLU = %v", g)
	}
}
