package tensor

import (
	"encoding/binary"
	"fmt"
	"math"
)

// Block byte offsets of the ggml layouts (ggml-common.h). Each comment gives
// the C struct in field order.

// block_q4_0 { half d; uint8 qs[16] }                      18 bytes / 32
// block_q4_1 { half d; half m; uint8 qs[16] }              20 bytes / 32
// block_q5_0 { half d; uint8 qh[4]; uint8 qs[16] }         22 bytes / 32
// block_q5_1 { half d; half m; uint8 qh[4]; uint8 qs[16] } 24 bytes / 32
// block_q8_0 { half d; int8 qs[32] }                       34 bytes / 32
// block_q2_K { uint8 scales[16]; uint8 qs[64]; half d; half dmin }          84 / 256
// block_q3_K { uint8 hmask[32]; uint8 qs[64]; uint8 scales[12]; half d }    110 / 256
// block_q4_K { half d; half dmin; uint8 scales[12]; uint8 qs[128] }         144 / 256
// block_q5_K { half d; half dmin; uint8 scales[12]; uint8 qh[32]; uint8 qs[128] } 176 / 256
// block_q6_K { uint8 ql[128]; uint8 qh[64]; int8 scales[16]; half d }       210 / 256

func f16At(b []byte) float32 {
	return f16Table[binary.LittleEndian.Uint16(b)]
}

// dequantizers maps a type to its row dequantizer. src holds whole blocks
// and len(dst) is the element count; sizes are checked by the caller.
var dequantizers = map[Type]func(src []byte, dst []float32){
	F32:  dequantF32,
	F16:  dequantF16,
	BF16: dequantBF16,
	Q4_0: dequantQ4_0,
	Q4_1: dequantQ4_1,
	Q5_0: dequantQ5_0,
	Q5_1: dequantQ5_1,
	Q8_0: dequantQ8_0,
	Q2_K: dequantQ2K,
	Q3_K: dequantQ3K,
	Q4_K: dequantQ4K,
	Q5_K: dequantQ5K,
	Q6_K: dequantQ6K,
}

// Dequantize converts len(dst) elements of type t, stored in ggml layout in
// src, to float32. len(src) must be exactly t.RowSize(len(dst)). It returns an
// error for an unsupported type or a size mismatch, never panics.
func Dequantize(t Type, src []byte, dst []float32) error {
	fn, ok := dequantizers[t]
	if !ok {
		return fmt.Errorf("tensor: dequantize: unsupported type %s", t)
	}
	n, err := t.RowSize(len(dst))
	if err != nil {
		return fmt.Errorf("tensor: dequantize: %w", err)
	}
	if n != len(src) {
		return fmt.Errorf("tensor: dequantize: %d %s elements need %d bytes, got %d", len(dst), t, n, len(src))
	}
	fn(src, dst)
	return nil
}

func dequantF32(src []byte, dst []float32) {
	for i := range dst {
		dst[i] = math.Float32frombits(binary.LittleEndian.Uint32(src[4*i:]))
	}
}

func dequantF16(src []byte, dst []float32) {
	for i := range dst {
		dst[i] = f16Table[binary.LittleEndian.Uint16(src[2*i:])]
	}
}

func dequantBF16(src []byte, dst []float32) {
	for i := range dst {
		dst[i] = BF16ToF32(binary.LittleEndian.Uint16(src[2*i:]))
	}
}

func dequantQ4_0(src []byte, dst []float32) {
	for ib := 0; ib < len(dst)/32; ib++ {
		b := src[ib*18 : ib*18+18]
		y := dst[ib*32 : ib*32+32]
		d := f16At(b)
		qs := b[2:18]
		for j := 0; j < 16; j++ {
			y[j] = float32(int32(qs[j]&0xf)-8) * d
			y[j+16] = float32(int32(qs[j]>>4)-8) * d
		}
	}
}

func dequantQ4_1(src []byte, dst []float32) {
	for ib := 0; ib < len(dst)/32; ib++ {
		b := src[ib*20 : ib*20+20]
		y := dst[ib*32 : ib*32+32]
		d, m := f16At(b), f16At(b[2:])
		qs := b[4:20]
		for j := 0; j < 16; j++ {
			y[j] = float32(float32(qs[j]&0xf)*d) + m
			y[j+16] = float32(float32(qs[j]>>4)*d) + m
		}
	}
}

func dequantQ5_0(src []byte, dst []float32) {
	for ib := 0; ib < len(dst)/32; ib++ {
		b := src[ib*22 : ib*22+22]
		y := dst[ib*32 : ib*32+32]
		d := f16At(b)
		qh := binary.LittleEndian.Uint32(b[2:])
		qs := b[6:22]
		for j := 0; j < 16; j++ {
			xh0 := byte((qh>>j)<<4) & 0x10
			xh1 := byte(qh>>(j+12)) & 0x10
			y[j] = float32(int32(qs[j]&0xf|xh0)-16) * d
			y[j+16] = float32(int32(qs[j]>>4|xh1)-16) * d
		}
	}
}

func dequantQ5_1(src []byte, dst []float32) {
	for ib := 0; ib < len(dst)/32; ib++ {
		b := src[ib*24 : ib*24+24]
		y := dst[ib*32 : ib*32+32]
		d, m := f16At(b), f16At(b[2:])
		qh := binary.LittleEndian.Uint32(b[4:])
		qs := b[8:24]
		for j := 0; j < 16; j++ {
			xh0 := byte((qh>>j)<<4) & 0x10
			xh1 := byte(qh>>(j+12)) & 0x10
			y[j] = float32(float32(qs[j]&0xf|xh0)*d) + m
			y[j+16] = float32(float32(qs[j]>>4|xh1)*d) + m
		}
	}
}

func dequantQ8_0(src []byte, dst []float32) {
	for ib := 0; ib < len(dst)/32; ib++ {
		b := src[ib*34 : ib*34+34]
		y := dst[ib*32 : ib*32+32]
		d := f16At(b)
		qs := b[2:34]
		for j := range 32 {
			y[j] = float32(int8(qs[j])) * d
		}
	}
}

// scaleMinK4 is ggml's get_scale_min_k4: the 6-bit scale and min of
// sub-block j from the 12 packed scale bytes of a Q4_K/Q5_K block.
func scaleMinK4(j int, q []byte) (sc, m uint8) {
	if j < 4 {
		return q[j] & 63, q[j+4] & 63
	}
	return q[j+4]&0xf | (q[j-4]>>6)<<4, q[j+4]>>4 | (q[j]>>6)<<4
}

func dequantQ2K(src []byte, dst []float32) {
	for ib := 0; ib < len(dst)/QK_K; ib++ {
		b := src[ib*84 : ib*84+84]
		y := dst[ib*QK_K : ib*QK_K+QK_K]
		scales := b[0:16]
		q := b[16:80]
		d, min := f16At(b[80:]), f16At(b[82:])
		is, yi := 0, 0
		for n := 0; n < QK_K; n += 128 {
			shift := uint(0)
			for j := 0; j < 4; j++ {
				sc := scales[is]
				is++
				dl, ml := d*float32(sc&0xf), float32(min*float32(sc>>4))
				for l := 0; l < 16; l++ {
					y[yi] = float32(dl*float32((q[l]>>shift)&3)) - ml
					yi++
				}
				sc = scales[is]
				is++
				dl, ml = d*float32(sc&0xf), float32(min*float32(sc>>4))
				for l := 0; l < 16; l++ {
					y[yi] = float32(dl*float32((q[l+16]>>shift)&3)) - ml
					yi++
				}
				shift += 2
			}
			q = q[32:]
		}
	}
}

// q3KScales unpacks the 16 6-bit signed (biased by 32) scales of a Q3_K block.
func q3KScales(s []byte) [16]int8 {
	const kmask1, kmask2 = 0x03030303, 0x0f0f0f0f
	a0 := binary.LittleEndian.Uint32(s[0:])
	a1 := binary.LittleEndian.Uint32(s[4:])
	tmp := binary.LittleEndian.Uint32(s[8:])
	aux := [4]uint32{
		(a0 & kmask2) | (((tmp >> 0) & kmask1) << 4),
		(a1 & kmask2) | (((tmp >> 2) & kmask1) << 4),
		((a0 >> 4) & kmask2) | (((tmp >> 4) & kmask1) << 4),
		((a1 >> 4) & kmask2) | (((tmp >> 6) & kmask1) << 4),
	}
	var out [16]int8
	for i := range 4 {
		for k := range 4 {
			out[4*i+k] = int8(aux[i] >> (8 * k))
		}
	}
	return out
}

func dequantQ3K(src []byte, dst []float32) {
	for ib := 0; ib < len(dst)/QK_K; ib++ {
		b := src[ib*110 : ib*110+110]
		y := dst[ib*QK_K : ib*QK_K+QK_K]
		hm := b[0:32]
		q := b[32:96]
		scales := q3KScales(b[96:108])
		dAll := f16At(b[108:])
		is, yi := 0, 0
		m := uint8(1)
		for n := 0; n < QK_K; n += 128 {
			shift := uint(0)
			for j := 0; j < 4; j++ {
				dl := dAll * float32(int32(scales[is])-32)
				is++
				for l := 0; l < 16; l++ {
					v := int32((q[l]>>shift)&3) - 4
					if hm[l]&m != 0 {
						v += 4
					}
					y[yi] = dl * float32(v)
					yi++
				}
				dl = dAll * float32(int32(scales[is])-32)
				is++
				for l := 0; l < 16; l++ {
					v := int32((q[l+16]>>shift)&3) - 4
					if hm[l+16]&m != 0 {
						v += 4
					}
					y[yi] = dl * float32(v)
					yi++
				}
				shift += 2
				m <<= 1
			}
			q = q[32:]
		}
	}
}

func dequantQ4K(src []byte, dst []float32) {
	for ib := 0; ib < len(dst)/QK_K; ib++ {
		b := src[ib*144 : ib*144+144]
		y := dst[ib*QK_K : ib*QK_K+QK_K]
		d, min := f16At(b), f16At(b[2:])
		scales := b[4:16]
		q := b[16:144]
		is, yi := 0, 0
		for j := 0; j < QK_K; j += 64 {
			sc, m := scaleMinK4(is, scales)
			d1, m1 := d*float32(sc), float32(min*float32(m))
			sc, m = scaleMinK4(is+1, scales)
			d2, m2 := d*float32(sc), float32(min*float32(m))
			for l := 0; l < 32; l++ {
				y[yi+l] = float32(d1*float32(q[l]&0xf)) - m1
				y[yi+32+l] = float32(d2*float32(q[l]>>4)) - m2
			}
			yi += 64
			q = q[32:]
			is += 2
		}
	}
}

func dequantQ5K(src []byte, dst []float32) {
	for ib := 0; ib < len(dst)/QK_K; ib++ {
		b := src[ib*176 : ib*176+176]
		y := dst[ib*QK_K : ib*QK_K+QK_K]
		d, min := f16At(b), f16At(b[2:])
		scales := b[4:16]
		qh := b[16:48]
		ql := b[48:176]
		is, yi := 0, 0
		u1, u2 := uint8(1), uint8(2)
		for j := 0; j < QK_K; j += 64 {
			sc, m := scaleMinK4(is, scales)
			d1, m1 := d*float32(sc), float32(min*float32(m))
			sc, m = scaleMinK4(is+1, scales)
			d2, m2 := d*float32(sc), float32(min*float32(m))
			for l := 0; l < 32; l++ {
				v1 := ql[l] & 0xf
				if qh[l]&u1 != 0 {
					v1 += 16
				}
				v2 := ql[l] >> 4
				if qh[l]&u2 != 0 {
					v2 += 16
				}
				y[yi+l] = float32(d1*float32(v1)) - m1
				y[yi+32+l] = float32(d2*float32(v2)) - m2
			}
			yi += 64
			ql = ql[32:]
			is += 2
			u1 <<= 2
			u2 <<= 2
		}
	}
}

func dequantQ6K(src []byte, dst []float32) {
	for ib := 0; ib < len(dst)/QK_K; ib++ {
		b := src[ib*210 : ib*210+210]
		y := dst[ib*QK_K : ib*QK_K+QK_K]
		ql := b[0:128]
		qh := b[128:192]
		sc := b[192:208]
		d := f16At(b[208:])
		for n := 0; n < 2; n++ {
			yy := y[n*128 : n*128+128]
			for l := 0; l < 32; l++ {
				is := l / 16
				q1 := int32(ql[l]&0xf|((qh[l]>>0)&3)<<4) - 32
				q2 := int32(ql[l+32]&0xf|((qh[l]>>2)&3)<<4) - 32
				q3 := int32(ql[l]>>4|((qh[l]>>4)&3)<<4) - 32
				q4 := int32(ql[l+32]>>4|((qh[l]>>6)&3)<<4) - 32
				yy[l] = float32(d*float32(int8(sc[is]))) * float32(q1)
				yy[l+32] = float32(d*float32(int8(sc[is+2]))) * float32(q2)
				yy[l+64] = float32(d*float32(int8(sc[is+4]))) * float32(q3)
				yy[l+96] = float32(d*float32(int8(sc[is+6]))) * float32(q4)
			}
			ql = ql[64:]
			qh = qh[32:]
			sc = sc[8:]
		}
	}
}
