//go:build amd64 && !purego

package tensor

import (
	"math"
	"math/rand/v2"
	"testing"
	"unsafe"
)

// q8kBytes is the memory of a block, compared byte for byte.
func q8kBytes(b *blockQ8K) []byte {
	return unsafe.Slice((*byte)(unsafe.Pointer(b)), unsafe.Sizeof(*b))
}

func checkQ8KAsm(t *testing.T, x []float32) {
	t.Helper()
	if q8kBlock == nil || !permuteQ8K {
		t.Skip("no AVX2 activation quantizer on this CPU")
	}
	nb := len(x) / QK_K
	var b blockQ8K
	padLo, padHi := unsafe.Offsetof(b.bsum2)+unsafe.Sizeof(b.bsum2), unsafe.Offsetof(b.lqs)
	want, got := make([]blockQ8K, nb), make([]blockQ8K, nb)
	for i := range got { // stale contents must be overwritten
		for j := range q8kBytes(&got[i]) {
			q8kBytes(&got[i])[j] = 0x5a
		}
		got[i].bsum2 = [16]int16{}
		clear(q8kBytes(&got[i])[padLo:padHi]) // the padding is never written
	}
	quantizeQ8KGo(x, want)
	quantizeQ8K(x, got)
	for i := range want {
		w, g := q8kBytes(&want[i]), q8kBytes(&got[i])
		for j := range w {
			if w[j] != g[j] {
				t.Fatalf("block %d byte %d: asm %#x, Go %#x (x[0:4] %v)", i, j, g[j], w[j], x[i*QK_K:i*QK_K+4])
			}
		}
	}
}

// TestQuantizeQ8KAsm checks the assembly activation quantizer against the
// Go port byte for byte: random scales, ties of the largest magnitude with
// both signs, exact .5 products, zero blocks, and NaN/Inf/subnormal values.
func TestQuantizeQ8KAsm(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	for trial := range 300 {
		x := make([]float32, 4*QK_K)
		scale := float32(math.Pow(10, r.Float64()*12-6))
		for i := range x {
			x[i] = scale * float32(r.NormFloat64())
		}
		switch trial % 6 {
		case 1: // the largest magnitude twice, the negative one later
			x[17], x[200] = 9*scale, -9*scale
		case 2: // the negative first
			x[3], x[255] = -9*scale, 9*scale
		case 3: // a zero block and small integers (ties at .5 after scaling)
			clear(x[QK_K : 2*QK_K])
			for i := 2 * QK_K; i < 3*QK_K; i++ {
				x[i] = float32(r.IntN(255) - 127)
			}
			x[2*QK_K+5] = 254
		case 4: // special values
			x[r.IntN(len(x))] = float32(math.NaN())
			x[r.IntN(len(x))] = float32(math.Inf(1 - 2*r.IntN(2)))
			x[r.IntN(len(x))] = math.Float32frombits(1)
		case 5: // a block of one value
			for i := range QK_K {
				x[i] = -scale
			}
		}
		checkQ8KAsm(t, x)
	}
}

// FuzzQuantizeQ8KAsm compares the assembly and Go quantizers on arbitrary
// float bit patterns.
func FuzzQuantizeQ8KAsm(f *testing.F) {
	f.Add([]byte{0, 0, 128, 63, 0, 0, 0, 192})
	f.Fuzz(func(t *testing.T, raw []byte) {
		x := make([]float32, QK_K)
		for i := range x {
			if k := 4 * i; k+4 <= len(raw) {
				x[i] = math.Float32frombits(uint32(raw[k]) | uint32(raw[k+1])<<8 | uint32(raw[k+2])<<16 | uint32(raw[k+3])<<24)
			} else if len(raw) > 0 {
				x[i] = float32(int8(raw[i%len(raw)]))
			}
		}
		checkQ8KAsm(t, x)
	})
}
