package tensor

import "encoding/binary"

// Pure-Go fast Q2_K and Q3_K kernels (purego builds and architectures
// without assembly for them): the generic kernels' integer sums and float
// steps, without the generic Q3_K's unpacked value array, over fixed-size
// array views so the compiler drops the bounds checks. Bit-identical to
// dotQ2KQ8KGeneric and dotQ3KQ8KGeneric (TestFastMatchesGeneric).

func dotQ2KQ8KFast(w []byte, y []blockQ8K) float32 {
	w = w[:84*len(y)]
	var sumf float32
	for i := range y {
		b := (*[84]byte)(w[i*84:])
		yb := &y[i]
		var summs int32
		for j := range 16 {
			summs += int32(yb.bsums[j]) * int32(b[j]>>4)
		}
		var isum int32
		for g := range 8 { // 32-value group g: qs bytes 32(g/4).., shift 2(g%4)
			q2 := (*[32]byte)(b[16+32*(g>>2):])
			q8 := (*[32]int8)(yb.qs[32*g:])
			shift := uint(2 * (g & 3))
			var s0, s1 int32
			for l := range 16 {
				s0 += int32(q8[l]) * int32((q2[l]>>shift)&3)
				s1 += int32(q8[l+16]) * int32((q2[l+16]>>shift)&3)
			}
			isum += int32(b[2*g]&0xf)*s0 + int32(b[2*g+1]&0xf)*s1
		}
		dall := yb.d * f16Table[binary.LittleEndian.Uint16(b[80:])]
		dmin := yb.d * f16Table[binary.LittleEndian.Uint16(b[82:])]
		sumf += float32(dall*float32(isum)) - float32(dmin*float32(summs))
	}
	return sumf
}

func dotQ3KQ8KFast(w []byte, y []blockQ8K) float32 {
	w = w[:110*len(y)]
	var sums [8]float32
	for i := range y {
		b := (*[110]byte)(w[i*110:])
		yb := &y[i]
		hm := (*[32]byte)(b[0:])
		sc := q3KScales(b[96:108])
		var aux [8]int32
		for g := range 8 { // 32-value group g: low bits at shift 2(g%4), high bit g
			q3 := (*[32]byte)(b[32+32*(g>>2):])
			q8 := (*[32]int8)(yb.qs[32*g:])
			shift, hs := uint(2*(g&3)), uint(g)
			s0, s1 := int32(sc[2*g])-32, int32(sc[2*g+1])-32
			for l := range 8 {
				v0 := int32((q3[l]>>shift)&3) + 4*int32((hm[l]>>hs)&1) - 4
				v1 := int32((q3[l+8]>>shift)&3) + 4*int32((hm[l+8]>>hs)&1) - 4
				v2 := int32((q3[l+16]>>shift)&3) + 4*int32((hm[l+16]>>hs)&1) - 4
				v3 := int32((q3[l+24]>>shift)&3) + 4*int32((hm[l+24]>>hs)&1) - 4
				aux[l] += s0*(int32(q8[l])*v0+int32(q8[l+8])*v1) + s1*(int32(q8[l+16])*v2+int32(q8[l+24])*v3)
			}
		}
		d := f16Table[binary.LittleEndian.Uint16(b[108:])] * yb.d
		for l := range 8 {
			sums[l] += float32(d * float32(aux[l]))
		}
	}
	var sumf float32
	for l := range 8 {
		sumf += sums[l]
	}
	return sumf
}
