package tensor

import (
	"encoding/binary"
	"math"
	"testing"
)

// FuzzDequantize feeds arbitrary bytes, types and lengths: the result must
// be an error or success, never a panic.
func FuzzDequantize(f *testing.F) {
	f.Add(uint32(Q4_K), 256, make([]byte, 144))
	f.Add(uint32(Q6_K), 255, make([]byte, 210))
	f.Add(uint32(Q8_0), 32, make([]byte, 33))
	f.Add(uint32(F16), 3, []byte{1, 2, 3, 4, 5, 6})
	f.Add(uint32(99), 1, []byte{0})
	f.Add(uint32(Q5_0), -32, []byte{})
	f.Fuzz(func(t *testing.T, typ uint32, n int, data []byte) {
		if n < -1<<20 || n > 1<<16 {
			return
		}
		dst := make([]float32, max(n, 0))
		if n < 0 {
			dst = nil
		}
		if err := Dequantize(Type(typ), data, dst); err == nil {
			if rb, _ := Type(typ).RowSize(len(dst)); rb != len(data) {
				t.Fatalf("accepted %d bytes for %d %s elements", len(data), len(dst), Type(typ))
			}
		}
	})
}

// FuzzMatVec checks that any matrix shape/type/data either works or errors.
func FuzzMatVec(f *testing.F) {
	f.Add(uint32(Q4_K), 2, 256, 256, 2, make([]byte, 288))
	f.Add(uint32(Q8_0), 3, 32, 32, 3, make([]byte, 100))
	f.Add(uint32(F32), 1, 4, 3, 1, make([]byte, 16))
	f.Add(uint32(Q6_K), -1, 256, 256, 0, make([]byte, 0))
	f.Fuzz(func(t *testing.T, typ uint32, rows, cols, xlen, dlen int, data []byte) {
		if rows > 64 || cols > 4096 || xlen < 0 || xlen > 8192 || dlen < 0 || dlen > 64 {
			return
		}
		m := Matrix{Type: Type(typ), Rows: rows, Cols: cols, Data: data}
		x := make([]float32, xlen)
		for i := range x {
			x[i] = float32(i%7) - 3
		}
		_ = MatVec(nil, make([]float32, dlen), m, x)
		_ = m.Row(0, make([]float32, max(cols, 0)))
	})
}

// FuzzQuantize quantizes arbitrary float bit patterns (NaN, Inf, subnormal,
// huge) with every quantizer: no panics, and the output always dequantizes.
func FuzzQuantize(f *testing.F) {
	f.Add([]byte{0, 0, 0xc0, 0x7f, 0, 0, 0x80, 0x7f, 1, 0, 0, 0, 0xff, 0xff, 0x7f, 0x7f})
	f.Add(make([]byte, 64))
	f.Fuzz(func(t *testing.T, raw []byte) {
		x := make([]float32, 512)
		for i := range x {
			if len(raw) >= 4 {
				k := (4 * i) % (len(raw) - 3)
				x[i] = math.Float32frombits(binary.LittleEndian.Uint32(raw[k:]))
			}
		}
		y := make([]float32, len(x))
		for typ := range quantizers {
			rb, _ := typ.RowSize(len(x))
			b := make([]byte, rb)
			if err := Quantize(typ, x, b); err != nil {
				t.Fatal(err)
			}
			if err := Dequantize(typ, b, y); err != nil {
				t.Fatal(err)
			}
		}
	})
}
