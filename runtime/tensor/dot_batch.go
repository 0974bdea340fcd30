package tensor

import "encoding/binary"

// Pure-Go batched Q6_K kernel (kernel.q8kN) for purego builds: each
// super-block of a weight row is unpacked once into signed values and
// per-16 scales, then dotted with every vector (1.3–1.6× the per-vector
// pure-Go kernel at 4–8 vectors). The same scheme for Q4_K was slower than
// its per-vector kernel (the nibbles are cheap to unpack), so Q4_K has none. The integer lanes are ggml-generic's aux32[8]
// (lane = element index mod 8) and the float combination is the generic
// one, so every vector's result is bit-identical to the generic kernel.

// lanes16 adds scale·w[k]·q[k] to lane k mod 8 for k < 16.
func lanes16(a *[8]int32, w *[16]int8, q *[16]int8, scale int32) {
	a[0] += scale * (int32(w[0])*int32(q[0]) + int32(w[8])*int32(q[8]))
	a[1] += scale * (int32(w[1])*int32(q[1]) + int32(w[9])*int32(q[9]))
	a[2] += scale * (int32(w[2])*int32(q[2]) + int32(w[10])*int32(q[10]))
	a[3] += scale * (int32(w[3])*int32(q[3]) + int32(w[11])*int32(q[11]))
	a[4] += scale * (int32(w[4])*int32(q[4]) + int32(w[12])*int32(q[12]))
	a[5] += scale * (int32(w[5])*int32(q[5]) + int32(w[13])*int32(q[13]))
	a[6] += scale * (int32(w[6])*int32(q[6]) + int32(w[14])*int32(q[14]))
	a[7] += scale * (int32(w[7])*int32(q[7]) + int32(w[15])*int32(q[15]))
}

// unpackQ6K sets v to the 256 values q-32 of a Q6_K block and sc to its 16
// scales.
func unpackQ6K(b *[210]byte, v *[QK_K]int8, sc *[16]int32) {
	for n := 0; n < 2; n++ {
		ql := (*[64]byte)(b[64*n:])
		qh := (*[32]byte)(b[128+32*n:])
		vv := (*[128]int8)(v[128*n:])
		for l := 0; l < 32; l++ {
			h := qh[l]
			vv[l] = int8(ql[l]&15|(h&3)<<4) - 32
			vv[l+32] = int8(ql[l+32]&15|(h>>2&3)<<4) - 32
			vv[l+64] = int8(ql[l]>>4|(h>>4&3)<<4) - 32
			vv[l+96] = int8(ql[l+32]>>4|(h>>6&3)<<4) - 32
		}
	}
	for j := range sc {
		sc[j] = int32(int8(b[192+j]))
	}
}

// dotQ6KQ8KRowsGo is the batched form of dotQ6KQ8KFast.
func dotQ6KQ8KRowsGo(w []byte, rows int, y []blockQ8K, nv int, dst []float32, stride int) {
	if rows == 0 || nv == 0 {
		return
	}
	nb := len(y) / nv
	w = w[:210*nb*rows]
	var v [QK_K]int8
	var sc [16]int32
	var sums [batchVectors][8]float32
	for r := 0; r < rows; r++ {
		sums = [batchVectors][8]float32{}
		for i := 0; i < nb; i++ {
			b := (*[210]byte)(w[(r*nb+i)*210:])
			unpackQ6K(b, &v, &sc)
			d := f16Table[binary.LittleEndian.Uint16(b[208:])]
			for k := 0; k < nv; k++ {
				yb := &y[k*nb+i]
				var aux [8]int32
				for j := 0; j < 16; j++ {
					lanes16(&aux, (*[16]int8)(v[16*j:]), (*[16]int8)(yb.qs[16*j:]), sc[j])
				}
				dd := d * yb.d
				s := &sums[k]
				for l := 0; l < 8; l++ {
					s[l] += float32(dd * float32(aux[l]))
				}
			}
		}
		for k := 0; k < nv; k++ {
			var sumf float32
			for l := 0; l < 8; l++ {
				sumf += sums[k][l]
			}
			dst[r+k*stride] = sumf
		}
	}
}
