package tensor

import "encoding/binary"

// Pure-Go batched Q2_K and Q3_K kernels (kernel.q8kN) for purego builds and
// architectures without a batched assembly form: each super-block of a
// weight row is unpacked once (2-bit values, or 3-bit values minus 4, in
// natural order, and the block's scales), then dotted with every vector.
// The integer sums are exact in any order and the float steps are the
// generic ones per vector, so each vector's result is bit-identical to
// dotQ2KQ8KGeneric and dotQ3KQ8KGeneric (TestBatchedMatchesGeneric).

// unpackQ2K sets v to the 256 2-bit values of a Q2_K block in natural
// order: value 32g+l is bits 2(g mod 4) of qs byte 32(g/4)+l.
func unpackQ2K(b *[84]byte, v *[QK_K]uint8) {
	for h := range 2 {
		q2 := (*[32]byte)(b[16+32*h:])
		vv := (*[128]uint8)(v[128*h:])
		for l := range 32 {
			q := q2[l]
			vv[l] = q & 3
			vv[l+32] = q >> 2 & 3
			vv[l+64] = q >> 4 & 3
			vv[l+96] = q >> 6
		}
	}
}

// dot16u adds the products of 16 unsigned 2-bit values with 16 int8s.
func dot16u(w *[16]uint8, q *[16]int8) int32 {
	return int32(w[0])*int32(q[0]) + int32(w[1])*int32(q[1]) + int32(w[2])*int32(q[2]) + int32(w[3])*int32(q[3]) +
		int32(w[4])*int32(q[4]) + int32(w[5])*int32(q[5]) + int32(w[6])*int32(q[6]) + int32(w[7])*int32(q[7]) +
		int32(w[8])*int32(q[8]) + int32(w[9])*int32(q[9]) + int32(w[10])*int32(q[10]) + int32(w[11])*int32(q[11]) +
		int32(w[12])*int32(q[12]) + int32(w[13])*int32(q[13]) + int32(w[14])*int32(q[14]) + int32(w[15])*int32(q[15])
}

// dotQ2KQ8KRowsGo is the batched form of dotQ2KQ8KFast: rows consecutive
// Q2_K rows dotted with nv vectors of len(y)/nv blocks, row r · vector v
// at dst[r+v*stride].
func dotQ2KQ8KRowsGo(w []byte, rows int, y []blockQ8K, nv int, dst []float32, stride int) {
	if rows == 0 || nv == 0 {
		return
	}
	nb := len(y) / nv
	w = w[:84*nb*rows]
	var v [QK_K]uint8
	var sc, mn [16]int32
	var sums [batchVectors]float32
	for r := 0; r < rows; r++ {
		sums = [batchVectors]float32{}
		for i := 0; i < nb; i++ {
			b := (*[84]byte)(w[(r*nb+i)*84:])
			unpackQ2K(b, &v)
			for j := range 16 {
				sc[j], mn[j] = int32(b[j]&0xf), int32(b[j]>>4)
			}
			d := f16Table[binary.LittleEndian.Uint16(b[80:])]
			dm := f16Table[binary.LittleEndian.Uint16(b[82:])]
			for k := 0; k < nv; k++ {
				yb := &y[k*nb+i]
				var summs, isum int32
				for j := range 16 {
					summs += int32(yb.bsums[j]) * mn[j]
					isum += sc[j] * dot16u((*[16]uint8)(v[16*j:]), (*[16]int8)(yb.qs[16*j:]))
				}
				dall, dmin := yb.d*d, yb.d*dm
				sums[k] += float32(dall*float32(isum)) - float32(dmin*float32(summs))
			}
		}
		for k := 0; k < nv; k++ {
			dst[r+k*stride] = sums[k]
		}
	}
}

// unpackQ3K sets v to the 256 values of a Q3_K block minus 4 (−4..3) in
// natural order and sc to its 16 scales minus 32.
func unpackQ3K(b *[110]byte, v *[QK_K]int8, sc *[16]int32) {
	hm := (*[32]byte)(b[0:])
	for g := range 8 { // 32-value group g: low bits at shift 2(g%4), high bit g
		q3 := (*[32]byte)(b[32+32*(g>>2):])
		vv := (*[32]int8)(v[32*g:])
		shift, hs := uint(2*(g&3)), uint(g)
		for l := range 32 {
			vv[l] = int8((q3[l]>>shift)&3|((hm[l]>>hs)&1)<<2) - 4
		}
	}
	s := q3KScales(b[96:108])
	for j := range sc {
		sc[j] = int32(s[j]) - 32
	}
}

// dotQ3KQ8KRowsGo is the batched form of dotQ3KQ8KFast (the generic
// kernel's eight int32 lanes, lane = element index mod 8, as Q6_K's).
func dotQ3KQ8KRowsGo(w []byte, rows int, y []blockQ8K, nv int, dst []float32, stride int) {
	if rows == 0 || nv == 0 {
		return
	}
	nb := len(y) / nv
	w = w[:110*nb*rows]
	var v [QK_K]int8
	var sc [16]int32
	var sums [batchVectors][8]float32
	for r := 0; r < rows; r++ {
		sums = [batchVectors][8]float32{}
		for i := 0; i < nb; i++ {
			b := (*[110]byte)(w[(r*nb+i)*110:])
			unpackQ3K(b, &v, &sc)
			d := f16Table[binary.LittleEndian.Uint16(b[108:])]
			for k := 0; k < nv; k++ {
				yb := &y[k*nb+i]
				var aux [8]int32
				for j := range 16 {
					lanes16(&aux, (*[16]int8)(v[16*j:]), (*[16]int8)(yb.qs[16*j:]), sc[j])
				}
				dd := d * yb.d
				s := &sums[k]
				for l := range 8 {
					s[l] += float32(dd * float32(aux[l]))
				}
			}
		}
		for k := 0; k < nv; k++ {
			var sumf float32
			for l := range 8 {
				sumf += sums[k][l]
			}
			dst[r+k*stride] = sumf
		}
	}
}
