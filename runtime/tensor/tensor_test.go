package tensor

import (
	"encoding/binary"
	"math"
	"math/rand/v2"
	"testing"
	"unsafe"
)

func randVec(r *rand.Rand, n int, scale float32) []float32 {
	x := make([]float32, n)
	for i := range x {
		x[i] = float32(r.NormFloat64()) * scale
	}
	return x
}

func quantize(t *testing.T, typ Type, x []float32) []byte {
	t.Helper()
	n, err := typ.RowSize(len(x))
	if err != nil {
		t.Fatal(err)
	}
	b := make([]byte, n)
	if err := Quantize(typ, x, b); err != nil {
		t.Fatal(err)
	}
	return b
}

func TestF16Conversions(t *testing.T) {
	cases := []struct {
		f float32
		h uint16
	}{
		{0, 0x0000},
		{float32(math.Copysign(0, -1)), 0x8000},
		{1, 0x3c00},
		{-2, 0xc000},
		{0.5, 0x3800},
		{65504, 0x7bff},
		{65520, 0x7c00}, // rounds to +Inf
		{float32(math.Inf(1)), 0x7c00},
		{float32(math.Inf(-1)), 0xfc00},
		{5.9604645e-08, 0x0001}, // smallest subnormal
		{1 + 1.0/2048, 0x3c00},  // tie: round to even (down)
		{1 + 3.0/2048, 0x3c02},  // tie: round to even (up)
		{0.333333343, 0x3555},
	}
	for _, c := range cases {
		if got := F32ToF16(c.f); got != c.h {
			t.Errorf("F32ToF16(%v) = %#04x, want %#04x", c.f, got, c.h)
		}
	}
	if h := F32ToF16(float32(math.NaN())); h&0x7c00 != 0x7c00 || h&0x3ff == 0 {
		t.Errorf("F32ToF16(NaN) = %#04x, not a NaN", h)
	}
	// Every finite half round-trips exactly.
	for h := 0; h < 1<<16; h++ {
		if h&0x7c00 == 0x7c00 {
			continue
		}
		if got := F32ToF16(F16ToF32(uint16(h))); got != uint16(h) {
			t.Fatalf("round trip %#04x -> %v -> %#04x", h, F16ToF32(uint16(h)), got)
		}
	}
	// RNE against a float64 reference on random floats in the normal range.
	r := rand.New(rand.NewPCG(1, 2))
	for i := 0; i < 100000; i++ {
		f := float32(r.NormFloat64() * 100)
		h := F32ToF16(f)
		got := float64(F16ToF32(h))
		// No other half is closer.
		for _, nb := range []uint16{h - 1, h + 1} {
			if nb&0x7c00 == 0x7c00 {
				continue
			}
			alt := float64(F16ToF32(nb))
			if math.Abs(alt-float64(f)) < math.Abs(got-float64(f)) {
				t.Fatalf("F32ToF16(%v) = %v, but %v is closer", f, got, alt)
			}
		}
	}
}

func TestBF16Conversions(t *testing.T) {
	cases := []struct {
		f float32
		h uint16
	}{
		{1, 0x3f80},
		{-2, 0xc000},
		{math.Float32frombits(0x3f808000), 0x3f80}, // tie, even stays
		{math.Float32frombits(0x3f818000), 0x3f82}, // tie, odd rounds up
		{math.Float32frombits(0x3f808001), 0x3f81},
	}
	for _, c := range cases {
		if got := F32ToBF16(c.f); got != c.h {
			t.Errorf("F32ToBF16(%#08x) = %#04x, want %#04x", math.Float32bits(c.f), got, c.h)
		}
		if got := BF16ToF32(c.h); F32ToBF16(got) != c.h {
			t.Errorf("BF16 round trip of %#04x", c.h)
		}
	}
}

// Known-answer blocks built by hand from the C struct layouts, so a layout
// bug fails regardless of the quantizers.
func TestDequantizeKnownAnswer(t *testing.T) {
	t.Run("Q8_0", func(t *testing.T) {
		b := make([]byte, 34)
		binary.LittleEndian.PutUint16(b, 0x3800) // d = 0.5
		for j := 0; j < 32; j++ {
			b[2+j] = uint8(int8(j - 16))
		}
		y := make([]float32, 32)
		mustDequant(t, Q8_0, b, y)
		for j := range y {
			if want := float32(j-16) * 0.5; y[j] != want {
				t.Fatalf("y[%d] = %v, want %v", j, y[j], want)
			}
		}
	})
	t.Run("Q4_0", func(t *testing.T) {
		b := make([]byte, 18)
		binary.LittleEndian.PutUint16(b, 0x4000) // d = 2
		for j := 0; j < 16; j++ {
			b[2+j] = uint8(j) | uint8(15-j)<<4
		}
		y := make([]float32, 32)
		mustDequant(t, Q4_0, b, y)
		for j := 0; j < 16; j++ {
			if y[j] != float32(j-8)*2 || y[j+16] != float32(7-j)*2 {
				t.Fatalf("j=%d: got %v,%v", j, y[j], y[j+16])
			}
		}
	})
	t.Run("Q5_0", func(t *testing.T) {
		b := make([]byte, 22)
		binary.LittleEndian.PutUint16(b, 0x3c00) // d = 1
		// element j (0..31) gets 5-bit value q[j] = (7*j) % 32
		var qh uint32
		for j := 0; j < 16; j++ {
			lo, hi := uint8(7*j%32), uint8(7*(j+16)%32)
			b[6+j] = lo&0xf | (hi&0xf)<<4
			qh |= uint32(lo>>4) << j
			qh |= uint32(hi>>4) << (j + 16)
		}
		binary.LittleEndian.PutUint32(b[2:], qh)
		y := make([]float32, 32)
		mustDequant(t, Q5_0, b, y)
		for j := range y {
			if want := float32(7*j%32 - 16); y[j] != want {
				t.Fatalf("y[%d] = %v, want %v", j, y[j], want)
			}
		}
	})
	t.Run("Q4_K", func(t *testing.T) {
		b := make([]byte, 144)
		binary.LittleEndian.PutUint16(b, 0x3c00)     // d = 1
		binary.LittleEndian.PutUint16(b[2:], 0x3800) // dmin = 0.5
		// scales 2 and mins 1 everywhere, except sub-block 5: scale 33, min 17
		// (exercising the high bits packed into bytes 1 and 5).
		copy(b[4:16], []byte{2, 2 | 0x80, 2, 2, 1, 1 | 0x40, 1, 1, 0x12, 0x11, 0x12, 0x12})
		for c := 0; c < 4; c++ {
			for l := 0; l < 32; l++ {
				b[16+32*c+l] = uint8(l%16) | uint8(15-l%16)<<4
			}
		}
		y := make([]float32, 256)
		mustDequant(t, Q4_K, b, y)
		for e := 0; e < 256; e++ {
			sub := e / 32
			l := e % 32
			q := l % 16
			if sub%2 == 1 {
				q = 15 - l%16
			}
			sc, mn := float32(2), float32(1)
			if sub == 5 {
				sc, mn = 33, 17
			}
			if want := sc*float32(q) - 0.5*mn; y[e] != want {
				t.Fatalf("y[%d] = %v, want %v", e, y[e], want)
			}
		}
	})
	t.Run("Q6_K", func(t *testing.T) {
		b := make([]byte, 210)
		binary.LittleEndian.PutUint16(b[208:], 0x3400) // d = 0.25
		q := func(e int) int { return (e * 7) % 64 }
		for e := 0; e < 256; e++ {
			half, r := e/128, e%128
			l, quarter := r%32, r/32
			ql := b[64*half : 64*half+64]
			qh := b[128+32*half : 128+32*half+32]
			v := uint8(q(e))
			switch quarter {
			case 0:
				ql[l] |= v & 0xf
			case 1:
				ql[l+32] |= v & 0xf
			case 2:
				ql[l] |= (v & 0xf) << 4
			case 3:
				ql[l+32] |= (v & 0xf) << 4
			}
			qh[l] |= (v >> 4) << (2 * quarter)
		}
		for j := 0; j < 16; j++ {
			b[192+j] = uint8(int8(j - 8))
		}
		y := make([]float32, 256)
		mustDequant(t, Q6_K, b, y)
		for e := range y {
			if want := 0.25 * float32(e/16-8) * float32(q(e)-32); y[e] != want {
				t.Fatalf("y[%d] = %v, want %v", e, y[e], want)
			}
		}
	})
}

func mustDequant(t *testing.T, typ Type, b []byte, y []float32) {
	t.Helper()
	if err := Dequantize(typ, b, y); err != nil {
		t.Fatal(err)
	}
}

// Round-trip error bounds: RMS error of quantize→dequantize relative to the
// RMS of N(0,1) data, per type (K-quants and 8-bit well below their bit
// budgets' expected error).
func TestQuantizeRoundTrip(t *testing.T) {
	bounds := map[Type]float64{
		F32: 0, F16: 5e-4, BF16: 4e-3,
		Q8_0: 0.01, Q6_K: 0.03, Q5_K: 0.05, Q5_0: 0.06, Q5_1: 0.05,
		Q4_K: 0.1, Q4_0: 0.12, Q4_1: 0.1,
	}
	r := rand.New(rand.NewPCG(3, 4))
	x := randVec(r, 4096, 1)
	for typ, bound := range bounds {
		t.Run(typ.String(), func(t *testing.T) {
			b := quantize(t, typ, x)
			y := make([]float32, len(x))
			mustDequant(t, typ, b, y)
			var se float64
			for i := range x {
				d := float64(x[i] - y[i])
				se += d * d
			}
			rms := math.Sqrt(se / float64(len(x)))
			if rms > bound {
				t.Errorf("%s round-trip RMS error %.4g > %.4g", typ, rms, bound)
			}
			if typ != F32 && rms == 0 {
				t.Errorf("%s round trip is lossless, suspicious", typ)
			}
		})
	}
}

func TestQuantizeZeroBlocks(t *testing.T) {
	for typ := range quantizers {
		x := make([]float32, 512)
		b := quantize(t, typ, x)
		y := make([]float32, 512)
		mustDequant(t, typ, b, y)
		for i, v := range y {
			if v != 0 {
				t.Fatalf("%s: zero input dequantizes to %v at %d", typ, v, i)
			}
		}
	}
}

func TestSizeErrors(t *testing.T) {
	if err := Dequantize(Q4_K, make([]byte, 144), make([]float32, 255)); err == nil {
		t.Error("Q4_K with 255 elements: want error")
	}
	if err := Dequantize(Q4_K, make([]byte, 143), make([]float32, 256)); err == nil {
		t.Error("short Q4_K block: want error")
	}
	if err := Dequantize(Type(99), nil, nil); err == nil {
		t.Error("unknown type: want error")
	}
	if err := Dequantize(Q8_K, make([]byte, 292), make([]float32, 256)); err == nil {
		t.Error("Q8_K has no dequantizer here: want error")
	}
	if err := Quantize(Q4_K, make([]float32, 32), make([]byte, 18)); err == nil {
		t.Error("Q4_K quantize of 32: want error")
	}
	m := Matrix{Type: Q8_0, Rows: 4, Cols: 64, Data: make([]byte, 4*68-1)}
	if err := MatVec(nil, make([]float32, 4), m, make([]float32, 64)); err == nil {
		t.Error("short matrix data: want error")
	}
	m.Data = make([]byte, 4*68)
	if err := MatVec(nil, make([]float32, 3), m, make([]float32, 64)); err == nil {
		t.Error("wrong dst length: want error")
	}
	if err := MatVec(nil, make([]float32, 4), m, make([]float32, 63)); err == nil {
		t.Error("wrong x length: want error")
	}
	if err := MatMul(nil, make([]float32, 8), m, make([]float32, 128), 3); err == nil {
		t.Error("wrong n: want error")
	}
	if err := m.Row(4, make([]float32, 64)); err == nil {
		t.Error("row out of range: want error")
	}
	if err := (Matrix{Type: I32, Rows: 1, Cols: 1, Data: make([]byte, 4)}).Row(0, make([]float32, 1)); err == nil {
		t.Error("I32 row: want error")
	}
}

// matTypes are the weight types with a matrix kernel, and their expected
// relative error of a dot product against the exact float64 dot of the
// dequantized weights with the float activation (the activation rounding
// error only).
var matTypes = []struct {
	t   Type
	tol float64
}{
	{F32, 1e-6}, {F16, 2e-3}, {BF16, 1e-2},
	{Q8_0, 2e-2}, {Q4_0, 2e-2}, {Q4_1, 2e-2}, {Q5_0, 2e-2}, {Q5_1, 2e-2},
	{Q2_K, 2e-2}, {Q3_K, 2e-2}, {Q4_K, 2e-2}, {Q5_K, 2e-2}, {Q6_K, 2e-2},
}

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
							w := make([]float32, cols)
							_ = m.Row(i, w)
							var nrm float64
							for k := range w {
								nrm += math.Abs(float64(w[k] * x[k]))
							}
							if d := math.Abs(float64(got[i] - want[i])); d > 1e-6*nrm {
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

// TestBlockQ8KLayout pins the blockQ8K field offsets the assembly uses.
func TestBlockQ8KLayout(t *testing.T) {
	var b blockQ8K
	var c blockQ8_0
	got := [...]uintptr{unsafe.Offsetof(b.d), unsafe.Offsetof(b.qs), unsafe.Offsetof(b.bsums), unsafe.Offsetof(b.pqs), unsafe.Offsetof(b.bsum2), unsafe.Offsetof(b.lqs), unsafe.Sizeof(b), unsafe.Offsetof(c.qs), unsafe.Sizeof(c)}
	want := [...]uintptr{0, 4, 260, 292, 548, 580, 836, 4, 36}
	if got != want {
		t.Fatalf("blockQ8K/blockQ8_0 layout %v, assembly expects %v", got, want)
	}
}

func TestSupportedTypes(t *testing.T) {
	got := SupportedTypes()
	if len(got) == 0 {
		t.Fatal("no supported types")
	}
	for i, typ := range got {
		if !Supported(typ) || !CanMatVec(typ) {
			t.Errorf("%s listed but not supported", typ)
		}
		if i > 0 && got[i-1] >= typ {
			t.Errorf("not sorted: %v", got)
		}
	}
	for _, typ := range []Type{F32, F16, Q8_0, Q4_K, Q6_K} {
		if !Supported(typ) {
			t.Errorf("%s should be supported", typ)
		}
	}
	if Supported(Type(99)) || Supported(I32) {
		t.Error("an unknown or integer type is reported supported")
	}
}
