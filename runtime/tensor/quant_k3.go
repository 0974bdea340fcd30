package tensor

// Q3_K quantizer. Layout (block_q3_K, 110 bytes per 256 values):
//
//	hmask[32]   high bit of each 3-bit level: value i -> byte i%32, bit i/32
//	qs[64]      low 2 bits, in the K-quant order of packLevels2
//	scales[12]  16 signed 6-bit sub-block scales, biased by 32: the low
//	            nibble of scale j is in byte j%8 (low nibble for j < 8,
//	            high nibble otherwise), its top 2 bits in byte 8 + j%4 at
//	            bit 2*(j/4)
//	d           f16 super-scale
//
// A value dequantizes to d*(scale-32)*(level-4), level in 0..7. The fit
// follows llama-quantize's reference quantizer without an importance matrix:
// per 16-value sub-block a symmetric fit to levels -4..3 weighted by x²,
// refined by coordinate descent on the levels; the 16 scales are quantized
// to 6 bits against the one of largest magnitude and every value is
// re-leveled with the rounded scales.

func init() { quantizers[Q3_K] = quantQ3K }

// symFit16 fits x as scale*l with integer l in -nmax..nmax-1, weighting
// value i by x[i]². It starts from the levels of the scale that maps the
// largest-magnitude value to -nmax, then repeatedly moves single levels to
// the value that the least-squares scale of the others suggests, keeping a
// move only when it raises (Σwxl)²/Σwl² (i.e. lowers the weighted error),
// for at most 5 sweeps. L receives l+nmax. It returns the scale.
func symFit16(x *[16]float32, L *[16]int8, nmax int32) float32 {
	var peak, peakAbs float32
	for _, v := range x {
		if a := abs32(v); a > peakAbs {
			peak, peakAbs = v, a
		}
	}
	if peakAbs < groupMaxEps {
		*L = [16]int8{}
		return 0
	}
	clamp := func(l int32) int32 { return max(-nmax, min(nmax-1, l)) }
	inv := -float32(nmax) / peak
	var lv [16]int32
	var sxl, sll float32
	for i, v := range x {
		lv[i] = clamp(nearestInt(float32(inv * v)))
		w := v * v
		fl := float32(lv[i])
		sxl += float32(w * v * fl)
		sll += float32(w * fl * fl)
	}
	for range 5 {
		moved := false
		for i, v := range x {
			w := v * v
			fl := float32(lv[i])
			rx := sxl - float32(w*v*fl) // Σwxl without value i
			if rx <= 0 {
				continue
			}
			rl := sll - float32(w*fl*fl)
			nl := clamp(nearestInt(v * rl / rx))
			if nl == lv[i] {
				continue
			}
			fn := float32(nl)
			nx := rx + float32(w*v*fn)
			n2 := rl + float32(w*fn*fn)
			if n2 > 0 && nx*nx*sll > sxl*sxl*n2 {
				lv[i], sxl, sll = nl, nx, n2
				moved = true
			}
		}
		if !moved {
			break
		}
	}
	for i := range lv {
		L[i] = int8(lv[i] + nmax)
	}
	return sxl / sll
}

// q3KPutScale stores the biased 6-bit scale v (0..63) of sub-block j.
func q3KPutScale(s []byte, j int, v uint8) {
	if j < 8 {
		s[j] |= v & 0xf
	} else {
		s[j-8] |= (v & 0xf) << 4
	}
	s[8+j%4] |= (v >> 4) << (2 * (j / 4))
}

func quantQ3K(src []float32, dst []byte) {
	var levels [QK_K]uint8
	var scales [16]float32
	var xs [16]float32
	var L [16]int8
	for ib := 0; ib < len(src)/QK_K; ib++ {
		x := src[ib*QK_K : ib*QK_K+QK_K]
		b := dst[ib*110 : ib*110+110]
		var top, topAbs float32
		for sb := range 16 {
			copy(xs[:], x[16*sb:16*sb+16])
			scales[sb] = symFit16(&xs, &L, 4)
			for i, l := range L {
				levels[16*sb+i] = uint8(l)
			}
			if a := abs32(scales[sb]); a > topAbs {
				top, topAbs = scales[sb], a
			}
		}
		for i := range b {
			b[i] = 0
		}
		sc := b[96:108]
		// A sub-block whose scale rounds to 0 keeps its fitted levels
		// (they dequantize to 0 either way).
		if top != 0 {
			inv := -32 / top
			for sb := range 16 {
				q3KPutScale(sc, sb, uint8(max(-32, min(31, nearestInt(float32(inv*scales[sb]))))+32))
			}
			putF16(b[108:], 1/inv)
		}
		d := f16At(b[108:])
		unpacked := q3KScales(sc)
		for sb := range 16 {
			ds := d * float32(int32(unpacked[sb])-32)
			if ds == 0 {
				continue
			}
			for i := 16 * sb; i < 16*sb+16; i++ {
				levels[i] = uint8(max(-4, min(3, nearestInt(x[i]/ds))) + 4)
			}
		}
		hm := b[0:32]
		for i, l := range levels {
			if l > 3 {
				hm[i%32] |= 1 << (i / 32)
			}
		}
		packLevels2(b[32:96], &levels)
	}
}
