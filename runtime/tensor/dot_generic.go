package tensor

import (
	"encoding/binary"
	"math"
)

// Generic dot products: faithful ports of ggml-cpu/quants.c
// ggml_vec_dot_<w>_<a>_generic. Integer sums are exact in any order; the
// float operations (per-block scale products and the running sum) happen in
// the same order as in the C code. Every float product is wrapped in an
// explicit float32 conversion so the Go compiler cannot fuse it into an FMA
// (it may on arm64), which keeps results identical across architectures.
//
// The fast paths in dot_fast.go must return bit-identical results; the
// tests check that.

// reduce8 sums 8 lane accumulators the way a 256-bit vector horizontal sum
// does: fold the high half onto the low half, then pairs, then the last two.
func reduce8(s0, s1, s2, s3, s4, s5, s6, s7 float32) float32 {
	t0, t1, t2, t3 := s0+s4, s1+s5, s2+s6, s3+s7
	return (t0 + t2) + (t1 + t3)
}

// dotF32Generic is the float32 dot product of a little-endian F32 row with x,
// accumulated in 8 lanes (lane = index mod 8) and folded with reduce8; the
// remainder (len not a multiple of 8) is added in order after folding.
func dotF32Generic(w []byte, x []float32) float32 {
	var s [8]float32
	n := len(x)
	i := 0
	for ; i+8 <= n; i += 8 {
		for l := 0; l < 8; l++ {
			s[l] += float32(math.Float32frombits(binary.LittleEndian.Uint32(w[4*(i+l):])) * x[i+l])
		}
	}
	r := reduce8(s[0], s[1], s[2], s[3], s[4], s[5], s[6], s[7])
	for ; i < n; i++ {
		r += float32(math.Float32frombits(binary.LittleEndian.Uint32(w[4*i:])) * x[i])
	}
	return r
}

// dotF16Generic is ggml_vec_dot_f16 with float32 lanes as in its SIMD form:
// both operands are halves (the activation was rounded to F16 first).
func dotF16Generic(w []byte, x []float32) float32 {
	var s [8]float32
	n := len(x)
	i := 0
	for ; i+8 <= n; i += 8 {
		for l := 0; l < 8; l++ {
			s[l] += float32(f16Table[binary.LittleEndian.Uint16(w[2*(i+l):])] * x[i+l])
		}
	}
	r := reduce8(s[0], s[1], s[2], s[3], s[4], s[5], s[6], s[7])
	for ; i < n; i++ {
		r += float32(f16Table[binary.LittleEndian.Uint16(w[2*i:])] * x[i])
	}
	return r
}

// dotBF16Generic is ggml_vec_dot_bf16: both operands bfloat16, float32 lanes.
func dotBF16Generic(w []byte, x []float32) float32 {
	var s [8]float32
	n := len(x)
	i := 0
	for ; i+8 <= n; i += 8 {
		for l := 0; l < 8; l++ {
			s[l] += float32(BF16ToF32(binary.LittleEndian.Uint16(w[2*(i+l):])) * x[i+l])
		}
	}
	r := reduce8(s[0], s[1], s[2], s[3], s[4], s[5], s[6], s[7])
	for ; i < n; i++ {
		r += float32(BF16ToF32(binary.LittleEndian.Uint16(w[2*i:])) * x[i])
	}
	return r
}

func dotQ8_0Q8_0Generic(w []byte, y []blockQ8_0) float32 {
	var sumf float32
	for ib := range y {
		b := w[ib*34 : ib*34+34]
		var sumi int32
		for j := 0; j < 32; j++ {
			sumi += int32(int8(b[2+j])) * int32(y[ib].qs[j])
		}
		sumf += float32(float32(sumi) * float32(f16At(b)*y[ib].d))
	}
	return sumf
}

func dotQ4_0Q8_0Generic(w []byte, y []blockQ8_0) float32 {
	var sumf float32
	for ib := range y {
		b := w[ib*18 : ib*18+18]
		var s0, s1 int32
		for j := 0; j < 16; j++ {
			v0 := int32(b[2+j]&0xf) - 8
			v1 := int32(b[2+j]>>4) - 8
			s0 += v0 * int32(y[ib].qs[j])
			s1 += v1 * int32(y[ib].qs[j+16])
		}
		sumf += float32(float32(float32(s0+s1)*f16At(b)) * y[ib].d)
	}
	return sumf
}

func dotQ4_1Q8_1Generic(w []byte, y []blockQ8_1) float32 {
	var sumf float32
	for ib := range y {
		b := w[ib*20 : ib*20+20]
		var s0, s1 int32
		for j := 0; j < 16; j++ {
			s0 += int32(b[4+j]&0xf) * int32(y[ib].qs[j])
			s1 += int32(b[4+j]>>4) * int32(y[ib].qs[j+16])
		}
		sumf += float32(float32(f16At(b)*y[ib].d)*float32(s0+s1)) + float32(f16At(b[2:])*y[ib].s)
	}
	return sumf
}

func dotQ5_0Q8_0Generic(w []byte, y []blockQ8_0) float32 {
	var sumf float32
	for ib := range y {
		b := w[ib*22 : ib*22+22]
		qh := binary.LittleEndian.Uint32(b[2:])
		qs := b[6:22]
		var s0, s1 int32
		for j := 0; j < 16; j++ {
			xh0 := byte((qh>>j)<<4) & 0x10
			xh1 := byte(qh>>(j+12)) & 0x10
			x0 := int32(qs[j]&0xf|xh0) - 16
			x1 := int32(qs[j]>>4|xh1) - 16
			s0 += x0 * int32(y[ib].qs[j])
			s1 += x1 * int32(y[ib].qs[j+16])
		}
		sumf += float32(float32(f16At(b)*y[ib].d) * float32(s0+s1))
	}
	return sumf
}

func dotQ5_1Q8_1Generic(w []byte, y []blockQ8_1) float32 {
	var sumf float32
	for ib := range y {
		b := w[ib*24 : ib*24+24]
		qh := binary.LittleEndian.Uint32(b[4:])
		qs := b[8:24]
		var s0, s1 int32
		for j := 0; j < 16; j++ {
			xh0 := byte((qh>>j)<<4) & 0x10
			xh1 := byte(qh>>(j+12)) & 0x10
			s0 += int32(qs[j]&0xf|xh0) * int32(y[ib].qs[j])
			s1 += int32(qs[j]>>4|xh1) * int32(y[ib].qs[j+16])
		}
		sumf += float32(float32(f16At(b)*y[ib].d)*float32(s0+s1)) + float32(f16At(b[2:])*y[ib].s)
	}
	return sumf
}

func dotQ2KQ8KGeneric(w []byte, y []blockQ8K) float32 {
	var sumf float32
	for i := range y {
		b := w[i*84 : i*84+84]
		sc := b[0:16]
		q2 := b[16:80]
		q8 := y[i].qs[:]
		var summs int32
		for j := 0; j < 16; j++ {
			summs += int32(y[i].bsums[j]) * int32(sc[j]>>4)
		}
		dall := y[i].d * f16At(b[80:])
		dmin := y[i].d * f16At(b[82:])
		var isum int32
		is := 0
		for k := 0; k < QK_K/128; k++ {
			shift := uint(0)
			for j := 0; j < 4; j++ {
				d := int32(sc[is] & 0xf)
				is++
				var isuml int32
				for l := 0; l < 16; l++ {
					isuml += int32(q8[l]) * int32((q2[l]>>shift)&3)
				}
				isum += d * isuml
				d = int32(sc[is] & 0xf)
				is++
				isuml = 0
				for l := 16; l < 32; l++ {
					isuml += int32(q8[l]) * int32((q2[l]>>shift)&3)
				}
				isum += d * isuml
				shift += 2
				q8 = q8[32:]
			}
			q2 = q2[32:]
		}
		sumf += float32(dall*float32(isum)) - float32(dmin*float32(summs))
	}
	return sumf
}

func dotQ3KQ8KGeneric(w []byte, y []blockQ8K) float32 {
	var sums [8]float32
	var sumf float32
	var a [QK_K]int8
	for i := range y {
		b := w[i*110 : i*110+110]
		hm := b[0:32]
		q3 := b[32:96]
		ai := 0
		m := uint8(1)
		for j := 0; j < QK_K; j += 128 {
			for shift := uint(0); shift < 8; shift += 2 {
				for l := 0; l < 32; l++ {
					v := int8((q3[l] >> shift) & 3)
					if hm[l]&m == 0 {
						v -= 4
					}
					a[ai+l] = v
				}
				ai += 32
				m <<= 1
			}
			q3 = q3[32:]
		}
		scales := q3KScales(b[96:108])
		var aux32 [8]int32
		for j := 0; j < QK_K/16; j++ {
			s := int32(scales[j]) - 32
			for l := 0; l < 16; l++ {
				aux32[l&7] += s * (int32(y[i].qs[16*j+l]) * int32(a[16*j+l]))
			}
		}
		d := f16At(b[108:]) * y[i].d
		for l := 0; l < 8; l++ {
			sums[l] += float32(d * float32(aux32[l]))
		}
	}
	for l := 0; l < 8; l++ {
		sumf += sums[l]
	}
	return sumf
}

// q4KScalesMins unpacks the 8 6-bit scales and mins of a Q4_K/Q5_K block.
func q4KScalesMins(q []byte) (sc, mn [8]uint8) {
	for j := 0; j < 8; j++ {
		sc[j], mn[j] = scaleMinK4(j, q)
	}
	return
}

func dotQ4KQ8KGeneric(w []byte, y []blockQ8K) float32 {
	var sums [8]float32
	var sumf float32
	for i := range y {
		b := w[i*144 : i*144+144]
		sc, mn := q4KScalesMins(b[4:16])
		q4 := b[16:144]
		var sumi int32
		for j := 0; j < QK_K/16; j++ {
			sumi += int32(y[i].bsums[j]) * int32(mn[j/2])
		}
		var aux32 [8]int32
		for j := 0; j < QK_K/32; j++ {
			s := int32(sc[j])
			qb := q4[(j/2)*32 : (j/2)*32+32]
			q8 := y[i].qs[j*32 : j*32+32]
			for l := 0; l < 32; l++ {
				v := qb[l] & 0xf
				if j&1 != 0 {
					v = qb[l] >> 4
				}
				aux32[l&7] += s * (int32(q8[l]) * int32(v))
			}
		}
		d := f16At(b) * y[i].d
		for l := 0; l < 8; l++ {
			sums[l] += float32(d * float32(aux32[l]))
		}
		dmin := f16At(b[2:]) * y[i].d
		sumf -= float32(dmin * float32(sumi))
	}
	for l := 0; l < 8; l++ {
		sumf += sums[l]
	}
	return sumf
}

func dotQ5KQ8KGeneric(w []byte, y []blockQ8K) float32 {
	var sums [8]float32
	var sumf float32
	for i := range y {
		b := w[i*176 : i*176+176]
		sc, mn := q4KScalesMins(b[4:16])
		qh := b[16:48]
		q4 := b[48:176]
		var sumi int32
		for j := 0; j < QK_K/16; j++ {
			sumi += int32(y[i].bsums[j]) * int32(mn[j/2])
		}
		var aux32 [8]int32
		for j := 0; j < QK_K/32; j++ {
			s := int32(sc[j])
			qb := q4[(j/2)*32 : (j/2)*32+32]
			q8 := y[i].qs[j*32 : j*32+32]
			m := uint8(1) << uint(j)
			for l := 0; l < 32; l++ {
				v := qb[l] & 0xf
				if j&1 != 0 {
					v = qb[l] >> 4
				}
				if qh[l]&m != 0 {
					v += 16
				}
				aux32[l&7] += s * (int32(q8[l]) * int32(v))
			}
		}
		d := f16At(b) * y[i].d
		for l := 0; l < 8; l++ {
			sums[l] += float32(d * float32(aux32[l]))
		}
		dmin := f16At(b[2:]) * y[i].d
		sumf -= float32(dmin * float32(sumi))
	}
	for l := 0; l < 8; l++ {
		sumf += sums[l]
	}
	return sumf
}

func dotQ6KQ8KGeneric(w []byte, y []blockQ8K) float32 {
	var sums [8]float32
	var sumf float32
	var a [QK_K]int8
	for i := range y {
		b := w[i*210 : i*210+210]
		ql := b[0:128]
		qh := b[128:192]
		scales := b[192:208]
		for n := 0; n < 2; n++ {
			aa := a[n*128 : n*128+128]
			for l := 0; l < 32; l++ {
				aa[l] = int8(ql[l]&0xf|((qh[l]>>0)&3)<<4) - 32
				aa[l+32] = int8(ql[l+32]&0xf|((qh[l]>>2)&3)<<4) - 32
				aa[l+64] = int8(ql[l]>>4|((qh[l]>>4)&3)<<4) - 32
				aa[l+96] = int8(ql[l+32]>>4|((qh[l]>>6)&3)<<4) - 32
			}
			ql = ql[64:]
			qh = qh[32:]
		}
		var aux32 [8]int32
		for j := 0; j < QK_K/16; j++ {
			s := int32(int8(scales[j]))
			for l := 0; l < 16; l++ {
				aux32[l&7] += s * (int32(y[i].qs[16*j+l]) * int32(a[16*j+l]))
			}
		}
		d := f16At(b[208:]) * y[i].d
		for l := 0; l < 8; l++ {
			sums[l] += float32(d * float32(aux32[l]))
		}
	}
	for l := 0; l < 8; l++ {
		sumf += sums[l]
	}
	return sumf
}
