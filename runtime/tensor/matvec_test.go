package tensor

import (
	"encoding/binary"
	"math"
	"math/rand/v2"
	"testing"
)

// makeMatrix builds a rows×cols matrix of type typ from N(0,1) data. For
// types without a quantizer (Q2_K, Q3_K) it fills random bytes with sane
// half scales.
func makeMatrix(t testing.TB, r *rand.Rand, typ Type, rows, cols int) Matrix {
	rb, err := typ.RowSize(cols)
	if err != nil {
		t.Fatal(err)
	}
	data := make([]byte, rows*rb)
	if CanQuantize(typ) {
		x := randVec(r, rows*cols, 1)
		for row := 0; row < rows; row++ {
			if err := Quantize(typ, x[row*cols:(row+1)*cols], data[row*rb:(row+1)*rb]); err != nil {
				t.Fatal(err)
			}
		}
	} else {
		for i := range data {
			data[i] = uint8(r.Uint32())
		}
		bs := typ.TypeSize()
		for off := 0; off < len(data); off += bs {
			switch typ {
			case Q2_K:
				binary.LittleEndian.PutUint16(data[off+80:], F32ToF16(0.01))
				binary.LittleEndian.PutUint16(data[off+82:], F32ToF16(0.005))
			case Q3_K:
				binary.LittleEndian.PutUint16(data[off+108:], F32ToF16(0.01))
			}
		}
	}
	return Matrix{Type: typ, Rows: rows, Cols: cols, Data: data}
}

func TestMatVecAgainstFloat(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	const rows, cols = 16, 512
	x := randVec(r, cols, 1)
	for _, tc := range matTypes {
		t.Run(tc.t.String(), func(t *testing.T) {
			m := makeMatrix(t, r, tc.t, rows, cols)
			got := make([]float32, rows)
			if err := MatVec(nil, got, m, x); err != nil {
				t.Fatal(err)
			}
			w := make([]float32, cols)
			var scale float64
			for row := 0; row < rows; row++ {
				if err := m.Row(row, w); err != nil {
					t.Fatal(err)
				}
				var ref, nrm float64
				for i := range w {
					ref += float64(w[i]) * float64(x[i])
					nrm += math.Abs(float64(w[i]) * float64(x[i]))
				}
				scale = max(scale, nrm)
				if d := math.Abs(float64(got[row]) - ref); d > tc.tol*nrm {
					t.Errorf("row %d: got %v, float reference %v (|Δ| %.3g > %.3g)", row, got[row], ref, d, tc.tol*nrm)
				}
			}
		})
	}
}

// TestFastMatchesGeneric requires the pure-Go fast kernels, and the SIMD
// integer kernels, to equal the ggml-generic port bit for bit. SIMD kernels
// that reorder a float sum (F32) must agree within 1e-6 of Σ|w·x|.
func TestFastMatchesGeneric(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 8))
	for _, tc := range matTypes {
		t.Run(tc.t.String(), func(t *testing.T) {
			for _, cols := range []int{256, 512, 1280, 264, 2560} {
				if cols%tc.t.BlockSize() != 0 {
					continue
				}
				m := makeMatrix(t, r, tc.t, 8, cols)
				for trial := 0; trial < 3; trial++ {
					x := randVec(r, cols, float32(trial*3+1))
					if trial == 2 {
						x[5] = 0 // exact zeros and ties
						x[cols-1] = -x[0]
					}
					want := genericMatVec(t, m, x)
					for _, set := range []struct {
						name  string
						ks    map[Type]*kernel
						exact bool
					}{
						{"go", goKernels, true},
						{"best", kernels, kernels[tc.t].exact},
					} {
						got := make([]float32, 8)
						if err := matMulWith(set.ks, nil, got, m, x, 1); err != nil {
							t.Fatal(err)
						}
						for i := range got {
							if set.exact {
								if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
									t.Fatalf("%s kernel, cols %d row %d: %v != generic %v", set.name, cols, i, got[i], want[i])
								}
								continue
							}
							if d := math.Abs(float64(got[i] - want[i])); d > 1e-6*absDot(m, i, x) {
								t.Fatalf("%s kernel, cols %d row %d: %v vs generic %v", set.name, cols, i, got[i], want[i])
							}
						}
					}
				}
			}
		})
	}
}

func genericMatVec(t testing.TB, m Matrix, x []float32) []float32 {
	k := genericKernels[m.Type]
	var sc scratch
	quantizeActivations(k.act, &sc, x, 1, m.Cols)
	rb, _ := m.rowBytes()
	j := &job{n: 1, x: x, sc: &sc, np: 1}
	j.parts[0] = part{m: m, rb: rb, k: k, dst: make([]float32, m.Rows)}
	j.rows(0, m.Rows)
	return j.parts[0].dst
}

func TestMatMulPoolsAgree(t *testing.T) {
	r := rand.New(rand.NewPCG(9, 10))
	p := NewPool(3)
	defer p.Close()
	for _, typ := range []Type{F32, F16, Q8_0, Q4_K, Q6_K, Q5_0} {
		const rows, cols, n = 37, 512, 3
		m := makeMatrix(t, r, typ, rows, cols)
		x := randVec(r, n*cols, 1)
		batched := make([]float32, n*rows)
		if err := MatMul(p, batched, m, x, n); err != nil {
			t.Fatal(err)
		}
		for v := 0; v < n; v++ {
			single := make([]float32, rows)
			if err := MatVec(nil, single, m, x[v*cols:(v+1)*cols]); err != nil {
				t.Fatal(err)
			}
			for i := range single {
				if single[i] != batched[v*rows+i] {
					t.Fatalf("%s: vector %d row %d: pooled batch %v != single %v", typ, v, i, batched[v*rows+i], single[i])
				}
			}
		}
	}
	if p.Threads() != 3 {
		t.Errorf("Threads() = %d", p.Threads())
	}
}

func TestMatVecNoAllocs(t *testing.T) {
	r := rand.New(rand.NewPCG(11, 12))
	p := NewPool(2)
	defer p.Close()
	for _, tc := range matTypes {
		m := makeMatrix(t, r, tc.t, 64, 1024)
		x := randVec(r, 3*1024, 1)
		dst := make([]float32, 3*64)
		_ = MatMul(p, dst, m, x, 3)
		if a := testing.AllocsPerRun(10, func() { _ = MatVec(p, dst[:64], m, x[:1024]) }); a != 0 {
			t.Errorf("%s: MatVec on a pool allocates %v times per call", tc.t, a)
		}
		if a := testing.AllocsPerRun(10, func() { _ = MatMul(nil, dst, m, x, 3) }); a != 0 && !raceEnabled {
			t.Errorf("%s: MatMul without a pool allocates %v times per call", tc.t, a)
		}
	}
}

func TestRowMatchesDequantize(t *testing.T) {
	r := rand.New(rand.NewPCG(13, 14))
	m := makeMatrix(t, r, Q6_K, 5, 512)
	all := make([]float32, 5*512)
	mustDequant(t, Q6_K, m.Data, all)
	row := make([]float32, 512)
	if err := m.Row(3, row); err != nil {
		t.Fatal(err)
	}
	for i := range row {
		if row[i] != all[3*512+i] {
			t.Fatalf("Row(3)[%d] = %v, want %v", i, row[i], all[3*512+i])
		}
	}
}

func TestQuantizeParallelMatches(t *testing.T) {
	r := rand.New(rand.NewPCG(15, 16))
	x := randVec(r, 256*300, 1) // 19 work items of 4096: several chunks
	p := NewPool(3)
	defer p.Close()
	for typ := range quantizers {
		rb, _ := typ.RowSize(len(x))
		want, got := make([]byte, rb), make([]byte, rb)
		if err := Quantize(typ, x, want); err != nil {
			t.Fatal(err)
		}
		for _, pool := range []*Pool{nil, p} {
			clear(got)
			if err := QuantizeParallel(pool, typ, x, got); err != nil {
				t.Fatal(err)
			}
			if string(got) != string(want) {
				t.Fatalf("%s: QuantizeParallel differs from Quantize", typ)
			}
		}
	}
	if err := QuantizeParallel(p, Q4_K, x[:100], make([]byte, 10)); err == nil {
		t.Error("bad size: want error")
	}
}

func TestRoundHalfAway(t *testing.T) {
	r := rand.New(rand.NewPCG(17, 18))
	cases := []float32{0, 0.5, -0.5, 1.5, -1.5, 2.5, 0.49999997, -0.49999997, 126.5, -127.5, 8388607.5, 16777216, 3e38, -3e38}
	for i := 0; i < 100000; i++ {
		cases = append(cases, float32(r.NormFloat64()*200), math.Float32frombits(r.Uint32()))
	}
	for _, f := range cases {
		want := float32(math.Round(float64(f)))
		if got := roundHalfAway(f); math.Float32bits(got) != math.Float32bits(want) && !(f != f && got != got) {
			t.Fatalf("roundHalfAway(%v) = %v, want %v", f, got, want)
		}
	}
}

func TestMatMulMultiMatchesSingle(t *testing.T) {
	r := rand.New(rand.NewPCG(19, 20))
	const cols, n = 512, 3
	ms := []Matrix{makeMatrix(t, r, Q4_K, 37, cols), makeMatrix(t, r, Q8_0, 5, cols), makeMatrix(t, r, F16, 11, cols), makeMatrix(t, r, BF16, 3, cols)}
	x := randVec(r, n*cols, 1)
	p := NewPool(2)
	defer p.Close()
	for _, pool := range []*Pool{nil, p} {
		dsts := make([][]float32, len(ms))
		for i, m := range ms {
			dsts[i] = make([]float32, n*m.Rows)
		}
		if err := MatMulMulti(pool, dsts, ms, x, n); err != nil {
			t.Fatal(err)
		}
		for i, m := range ms {
			want := make([]float32, n*m.Rows)
			if err := MatMul(nil, want, m, x, n); err != nil {
				t.Fatal(err)
			}
			for k := range want {
				if want[k] != dsts[i][k] {
					t.Fatalf("matrix %d (%s) value %d: multi %v, single %v", i, m.Type, k, dsts[i][k], want[k])
				}
			}
		}
	}
	many := make([]Matrix, 17)
	manyDst := make([][]float32, 17)
	for i := range many {
		many[i], manyDst[i] = ms[1], make([]float32, ms[1].Rows)
	}
	if err := MatMulMulti(nil, manyDst[:16], many[:16], x[:cols], 1); err != nil {
		t.Errorf("16 matrices: %v", err)
	}
	for i := 1; i < 16; i++ {
		for k := range manyDst[i] {
			if manyDst[i][k] != manyDst[0][k] {
				t.Fatalf("matrix %d of 16 differs", i)
			}
		}
	}
	if err := MatMulMulti(nil, manyDst, many, x[:cols], 1); err == nil {
		t.Error("17 matrices: want error")
	}
	if err := MatMulMulti(nil, [][]float32{make([]float32, 37)}, []Matrix{ms[0], ms[1]}, x[:cols], 1); err == nil {
		t.Error("dsts/ms length mismatch: want error")
	}
	other := makeMatrix(t, r, Q8_0, 2, 256)
	if err := MatMulMulti(nil, [][]float32{make([]float32, 37), make([]float32, 2)}, []Matrix{ms[0], other}, x[:cols], 1); err == nil {
		t.Error("different Cols: want error")
	}
}

// absDot returns Σ|w·x| for row i of m, the scale of a reordered float
// sum's rounding error.
func absDot(m Matrix, i int, x []float32) float64 {
	w := make([]float32, m.Cols)
	_ = m.Row(i, w)
	var nrm float64
	for k := range w {
		nrm += math.Abs(float64(w[k] * x[k]))
	}
	return nrm
}
