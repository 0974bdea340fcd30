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

// TestBlockQ8KLayout pins the blockQ8K field offsets the assembly uses.
func TestBlockQ8KLayout(t *testing.T) {
	var b blockQ8K
	var c blockQ8_0
	got := [...]uintptr{unsafe.Offsetof(b.d), unsafe.Offsetof(b.qs), unsafe.Offsetof(b.bsums), unsafe.Offsetof(b.pqs), unsafe.Offsetof(b.bsum2), unsafe.Offsetof(b.lqs), unsafe.Sizeof(b), unsafe.Offsetof(c.qs), unsafe.Sizeof(c)}
	want := [...]uintptr{0, 4, 260, 292, 548, 608, 864, 4, 36}
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
