//go:generate sh -c "python3 gen_lanes.py && gofmt -w lanes_gen.go"

package tensor

import (
	"encoding/binary"
	"math"
)

// Pure-Go fast kernels: the same arithmetic as dot_generic.go (the 8 integer
// lane sums per super-block are identical, lane = element index mod 8, and
// the float combination is the same sequence), restructured for speed:
// fixed-size array views so the compiler drops bounds checks, no
// intermediate unpacked arrays, and unrolled lane accumulators.

// fastKernels returns the optimised kernels that replace the generic ones.
// Each must be bit-identical to its generic counterpart (tested).
func fastKernels() map[Type]*kernel {
	return map[Type]*kernel{
		F32:  {act: actF32, f32: dotF32Fast},
		F16:  {act: actF16, f32: dotF16Fast},
		BF16: {act: actBF16, f32: dotBF16Fast},
		Q8_0: {act: actQ8_0, q80: dotQ8_0Q8_0Fast},
		Q4_0: {act: actQ8_0, q80: dotQ4_0Q8_0Fast},
		Q5_0: {act: actQ8_0, q80: dotQ5_0Q8_0Fast},
		Q2_K: {act: actQ8K, q8k: dotQ2KQ8KFast, q8kN: dotQ2KQ8KRowsGo},
		Q3_K: {act: actQ8K, q8k: dotQ3KQ8KFast, q8kN: dotQ3KQ8KRowsGo},
		Q4_K: {act: actQ8K, q8k: dotQ4KQ8KFast},
		Q5_K: {act: actQ8K, q8k: dotQ5KQ8KFast},
		Q6_K: {act: actQ8K, q8k: dotQ6KQ8KFast, q8kN: dotQ6KQ8KRowsGo},
	}
}

func dotF32Fast(w []byte, x []float32) float32 {
	n := len(x)
	w = w[:4*n]
	var s0, s1, s2, s3, s4, s5, s6, s7 float32
	i := 0
	for ; i+8 <= n; i += 8 {
		ww := (*[32]byte)(w[4*i:])
		xx := (*[8]float32)(x[i:])
		s0 += float32(math.Float32frombits(binary.LittleEndian.Uint32(ww[0:])) * xx[0])
		s1 += float32(math.Float32frombits(binary.LittleEndian.Uint32(ww[4:])) * xx[1])
		s2 += float32(math.Float32frombits(binary.LittleEndian.Uint32(ww[8:])) * xx[2])
		s3 += float32(math.Float32frombits(binary.LittleEndian.Uint32(ww[12:])) * xx[3])
		s4 += float32(math.Float32frombits(binary.LittleEndian.Uint32(ww[16:])) * xx[4])
		s5 += float32(math.Float32frombits(binary.LittleEndian.Uint32(ww[20:])) * xx[5])
		s6 += float32(math.Float32frombits(binary.LittleEndian.Uint32(ww[24:])) * xx[6])
		s7 += float32(math.Float32frombits(binary.LittleEndian.Uint32(ww[28:])) * xx[7])
	}
	r := reduce8(s0, s1, s2, s3, s4, s5, s6, s7)
	for ; i < n; i++ {
		r += float32(math.Float32frombits(binary.LittleEndian.Uint32(w[4*i:])) * x[i])
	}
	return r
}

func dotF16Fast(w []byte, x []float32) float32 {
	n := len(x)
	w = w[:2*n]
	t := f16Table
	var s0, s1, s2, s3, s4, s5, s6, s7 float32
	i := 0
	for ; i+8 <= n; i += 8 {
		ww := (*[16]byte)(w[2*i:])
		xx := (*[8]float32)(x[i:])
		s0 += float32(t[binary.LittleEndian.Uint16(ww[0:])] * xx[0])
		s1 += float32(t[binary.LittleEndian.Uint16(ww[2:])] * xx[1])
		s2 += float32(t[binary.LittleEndian.Uint16(ww[4:])] * xx[2])
		s3 += float32(t[binary.LittleEndian.Uint16(ww[6:])] * xx[3])
		s4 += float32(t[binary.LittleEndian.Uint16(ww[8:])] * xx[4])
		s5 += float32(t[binary.LittleEndian.Uint16(ww[10:])] * xx[5])
		s6 += float32(t[binary.LittleEndian.Uint16(ww[12:])] * xx[6])
		s7 += float32(t[binary.LittleEndian.Uint16(ww[14:])] * xx[7])
	}
	r := reduce8(s0, s1, s2, s3, s4, s5, s6, s7)
	for ; i < n; i++ {
		r += float32(t[binary.LittleEndian.Uint16(w[2*i:])] * x[i])
	}
	return r
}

func bf(h uint16) float32 { return math.Float32frombits(uint32(h) << 16) }

func dotBF16Fast(w []byte, x []float32) float32 {
	n := len(x)
	w = w[:2*n]
	var s0, s1, s2, s3, s4, s5, s6, s7 float32
	i := 0
	for ; i+8 <= n; i += 8 {
		ww := (*[16]byte)(w[2*i:])
		xx := (*[8]float32)(x[i:])
		s0 += float32(bf(binary.LittleEndian.Uint16(ww[0:])) * xx[0])
		s1 += float32(bf(binary.LittleEndian.Uint16(ww[2:])) * xx[1])
		s2 += float32(bf(binary.LittleEndian.Uint16(ww[4:])) * xx[2])
		s3 += float32(bf(binary.LittleEndian.Uint16(ww[6:])) * xx[3])
		s4 += float32(bf(binary.LittleEndian.Uint16(ww[8:])) * xx[4])
		s5 += float32(bf(binary.LittleEndian.Uint16(ww[10:])) * xx[5])
		s6 += float32(bf(binary.LittleEndian.Uint16(ww[12:])) * xx[6])
		s7 += float32(bf(binary.LittleEndian.Uint16(ww[14:])) * xx[7])
	}
	r := reduce8(s0, s1, s2, s3, s4, s5, s6, s7)
	for ; i < n; i++ {
		r += float32(bf(binary.LittleEndian.Uint16(w[2*i:])) * x[i])
	}
	return r
}

// dot8i8 returns the dot product of 8 signed weight bytes with 8 int8s.
func dot8i8(w *[8]byte, q *[8]int8) int32 {
	return int32(int8(w[0]))*int32(q[0]) + int32(int8(w[1]))*int32(q[1]) +
		int32(int8(w[2]))*int32(q[2]) + int32(int8(w[3]))*int32(q[3]) +
		int32(int8(w[4]))*int32(q[4]) + int32(int8(w[5]))*int32(q[5]) +
		int32(int8(w[6]))*int32(q[6]) + int32(int8(w[7]))*int32(q[7])
}

func dotQ8_0Q8_0Fast(w []byte, y []blockQ8_0) float32 {
	w = w[:34*len(y)]
	var sumf float32
	for ib := range y {
		b := (*[34]byte)(w[ib*34:])
		q := &y[ib].qs
		sumi := dot8i8((*[8]byte)(b[2:]), (*[8]int8)(q[0:])) +
			dot8i8((*[8]byte)(b[10:]), (*[8]int8)(q[8:])) +
			dot8i8((*[8]byte)(b[18:]), (*[8]int8)(q[16:])) +
			dot8i8((*[8]byte)(b[26:]), (*[8]int8)(q[24:]))
		sumf += float32(float32(sumi) * float32(f16Table[binary.LittleEndian.Uint16(b[0:])]*y[ib].d))
	}
	return sumf
}

// dotNib8 returns Σ (w[k]&15 + off)*qlo[k] + (w[k]>>4 + off)*qhi[k] for k<8.
func dotNib8(w *[8]byte, qlo, qhi *[8]int8, off int32) int32 {
	var s int32
	for k := 0; k < 8; k++ {
		s += (int32(w[k]&15)+off)*int32(qlo[k]) + (int32(w[k]>>4)+off)*int32(qhi[k])
	}
	return s
}

func dotQ4_0Q8_0Fast(w []byte, y []blockQ8_0) float32 {
	w = w[:18*len(y)]
	var sumf float32
	for ib := range y {
		b := (*[18]byte)(w[ib*18:])
		q := &y[ib].qs
		sumi := dotNib8((*[8]byte)(b[2:]), (*[8]int8)(q[0:]), (*[8]int8)(q[16:]), -8) +
			dotNib8((*[8]byte)(b[10:]), (*[8]int8)(q[8:]), (*[8]int8)(q[24:]), -8)
		sumf += float32(float32(float32(sumi)*f16Table[binary.LittleEndian.Uint16(b[0:])]) * y[ib].d)
	}
	return sumf
}

func dotQ5_0Q8_0Fast(w []byte, y []blockQ8_0) float32 {
	w = w[:22*len(y)]
	var sumf float32
	for ib := range y {
		b := (*[22]byte)(w[ib*22:])
		sumi := q5_0Block((*[16]byte)(b[6:]), binary.LittleEndian.Uint32(b[2:]), &y[ib].qs)
		sumf += float32(float32(f16Table[binary.LittleEndian.Uint16(b[0:])]*y[ib].d) * float32(sumi))
	}
	return sumf
}

// kScales unpacks the 8 scales and 8 mins of a Q4_K/Q5_K block from its 12
// packed bytes (ggml's utmp/kmask shuffle).
func kScales(s *[12]byte) (sc, mn [8]int32) {
	for j := 0; j < 4; j++ {
		sc[j] = int32(s[j] & 63)
		mn[j] = int32(s[j+4] & 63)
		sc[j+4] = int32(s[j+8]&15 | (s[j]>>6)<<4)
		mn[j+4] = int32(s[j+8]>>4 | (s[j+4]>>6)<<4)
	}
	return
}

func dotQ4KQ8KFast(w []byte, y []blockQ8K) float32 {
	w = w[:144*len(y)]
	var sums [8]float32
	var sumf float32
	for i := range y {
		b := (*[144]byte)(w[i*144:])
		yb := &y[i]
		sc, mn := kScales((*[12]byte)(b[4:]))
		var sumi int32
		for j := 0; j < 8; j++ {
			sumi += (int32(yb.bsums[2*j]) + int32(yb.bsums[2*j+1])) * mn[j]
		}
		var aux [8]int32
		for j := 0; j < 4; j++ {
			q := (*[32]byte)(b[16+32*j:])
			lanes4lo(&aux, q, (*[32]int8)(yb.qs[64*j:]), sc[2*j])
			lanes4hi(&aux, q, (*[32]int8)(yb.qs[64*j+32:]), sc[2*j+1])
		}
		d := f16Table[binary.LittleEndian.Uint16(b[0:])] * yb.d
		for l := 0; l < 8; l++ {
			sums[l] += float32(d * float32(aux[l]))
		}
		dmin := f16Table[binary.LittleEndian.Uint16(b[2:])] * yb.d
		sumf -= float32(dmin * float32(sumi))
	}
	for l := 0; l < 8; l++ {
		sumf += sums[l]
	}
	return sumf
}

func dotQ5KQ8KFast(w []byte, y []blockQ8K) float32 {
	w = w[:176*len(y)]
	var sums [8]float32
	var sumf float32
	for i := range y {
		b := (*[176]byte)(w[i*176:])
		yb := &y[i]
		sc, mn := kScales((*[12]byte)(b[4:]))
		var sumi int32
		for j := 0; j < 8; j++ {
			sumi += (int32(yb.bsums[2*j]) + int32(yb.bsums[2*j+1])) * mn[j]
		}
		qh := (*[32]byte)(b[16:])
		var aux [8]int32
		for j := 0; j < 4; j++ {
			q := (*[32]byte)(b[48+32*j:])
			lanes5lo(&aux, q, qh, (*[32]int8)(yb.qs[64*j:]), uint(2*j), sc[2*j])
			lanes5hi(&aux, q, qh, (*[32]int8)(yb.qs[64*j+32:]), uint(2*j+1), sc[2*j+1])
		}
		d := f16Table[binary.LittleEndian.Uint16(b[0:])] * yb.d
		for l := 0; l < 8; l++ {
			sums[l] += float32(d * float32(aux[l]))
		}
		dmin := f16Table[binary.LittleEndian.Uint16(b[2:])] * yb.d
		sumf -= float32(dmin * float32(sumi))
	}
	for l := 0; l < 8; l++ {
		sumf += sums[l]
	}
	return sumf
}

func dotQ6KQ8KFast(w []byte, y []blockQ8K) float32 {
	w = w[:210*len(y)]
	var sums [8]float32
	var sumf float32
	for i := range y {
		b := (*[210]byte)(w[i*210:])
		yb := &y[i]
		var aux [8]int32
		for n := 0; n < 2; n++ {
			ql := b[64*n : 64*n+64]
			qh := b[128+32*n : 128+32*n+32]
			sc := b[192+8*n : 192+8*n+8]
			q8 := yb.qs[128*n : 128*n+128]
			// quarter k covers elements 32k..32k+31 of this half: ql offset
			// 0 or 32, nibble shift 0 or 4, qh bits 2k.
			for h := 0; h < 2; h++ {
				qlh := (*[16]byte)(ql[16*h:])
				qlh2 := (*[16]byte)(ql[32+16*h:])
				qhh := (*[16]byte)(qh[16*h:])
				lanes6lo(&aux, qlh, qhh, (*[16]int8)(q8[16*h:]), 0, int32(int8(sc[h])))
				lanes6lo(&aux, qlh2, qhh, (*[16]int8)(q8[32+16*h:]), 2, int32(int8(sc[2+h])))
				lanes6hi(&aux, qlh, qhh, (*[16]int8)(q8[64+16*h:]), 4, int32(int8(sc[4+h])))
				lanes6hi(&aux, qlh2, qhh, (*[16]int8)(q8[96+16*h:]), 6, int32(int8(sc[6+h])))
			}
		}
		d := f16Table[binary.LittleEndian.Uint16(b[208:])] * yb.d
		for l := 0; l < 8; l++ {
			sums[l] += float32(d * float32(aux[l]))
		}
	}
	for l := 0; l < 8; l++ {
		sumf += sums[l]
	}
	return sumf
}
