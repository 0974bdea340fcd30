package tensor

// Q2_K quantizer. Layout (block_q2_K, 84 bytes per 256 values):
//
//	scales[16]  per 16-value sub-block: low nibble = 4-bit scale, high nibble = 4-bit min
//	qs[64]      2-bit levels; value i of 128-value half h lives in byte
//	            h*32 + i%32 at bit 2*((i/32)%4)
//	d, dmin     f16 super-scales of the sub-block scales and mins
//
// A value dequantizes to d*scale*q - dmin*min with q in 0..3. The fit
// follows llama-quantize's reference quantizer without an importance matrix:
// per sub-block an affine (scale, min) fit weighted by |x| under absolute
// error, searched over 16 trial scales; then the 16 scales and mins are
// quantized to 4 bits against their maxima, and every value is re-leveled
// with the rounded scales.

func init() { quantizers[Q2_K] = quantQ2K }

// affineFit16 fits the 16 values x as scale*q - off with q in 0..nmax,
// minimising Σ w·|error|. It tries the plain range fit and, for each trial
// t in 0..steps, the levels of the inverse scale (nmax + lo + t·step)/range,
// refitting (scale, off) to each trial's levels by weighted least squares
// (off is kept ≥ 0, i.e. the fitted minimum ≤ 0). q receives the best
// levels. It returns scale and off.
func affineFit16(x, w *[16]float32, q *[16]uint8, nmax int32, lo, step float32, steps int) (scale, off float32) {
	lowest, highest := x[0], x[0]
	var sw, swx float32
	for i := range 16 {
		lowest = min(lowest, x[i])
		highest = max(highest, x[i])
		sw += w[i]
		swx += float32(w[i] * x[i])
	}
	lowest = min(lowest, 0)
	if highest == lowest {
		*q = [16]uint8{}
		return 0, -lowest
	}
	span := highest - lowest
	inv := float32(nmax) / span
	scale = 1 / inv
	base := lowest // the current fitted minimum (≤ 0)
	cost := func(s, m float32, lv *[16]uint8) float32 {
		var e float32
		for i := range 16 {
			e += float32(w[i] * abs32(float32(s*float32(lv[i]))+m-x[i]))
		}
		return e
	}
	for i := range 16 {
		q[i] = uint8(max(0, min(nmax, nearestInt(float32(inv*(x[i]-base))))))
	}
	best := cost(scale, base, q)
	var trial [16]uint8
	for t := 0; t <= steps; t++ {
		inv = (lo + float32(step*float32(t)) + float32(nmax)) / span
		var sl, sll, slx float32
		for i := range 16 {
			l := max(0, min(nmax, nearestInt(float32(inv*(x[i]-base)))))
			trial[i] = uint8(l)
			fl := float32(l)
			wl := float32(w[i] * fl)
			sl += wl
			sll += float32(wl * fl)
			slx += float32(wl * x[i])
		}
		det := float32(sw*sll) - float32(sl*sl)
		if det <= 0 {
			continue
		}
		s := (float32(sw*slx) - float32(swx*sl)) / det
		m := (float32(sll*swx) - float32(sl*slx)) / det
		if m > 0 {
			m = 0
			s = slx / sll
		}
		if e := cost(s, m, &trial); e < best {
			best, scale, base = e, s, m
			*q = trial
		}
	}
	return scale, -base
}

func quantQ2K(src []float32, dst []byte) {
	const maxLevel = 3
	var levels [QK_K]uint8
	var scales, mins [16]float32
	var xs, ws [16]float32
	for ib := 0; ib < len(src)/QK_K; ib++ {
		x := src[ib*QK_K : ib*QK_K+QK_K]
		b := dst[ib*84 : ib*84+84]
		var topScale, topMin float32
		for sb := range 16 {
			copy(xs[:], x[16*sb:16*sb+16])
			for i, v := range xs {
				ws[i] = abs32(v)
			}
			scales[sb], mins[sb] = affineFit16(&xs, &ws, (*[16]uint8)(levels[16*sb:]), maxLevel, -0.5, 0.1, 15)
			topScale = max(topScale, scales[sb])
			topMin = max(topMin, mins[sb])
		}
		sc := b[0:16]
		for i := range sc {
			sc[i] = 0
		}
		// 4-bit scales and mins relative to their maxima.
		putF16(b[80:], 0)
		putF16(b[82:], 0)
		if topScale > 0 {
			k := 15 / topScale
			for sb := range 16 {
				sc[sb] = uint8(nearestInt(float32(k * scales[sb])))
			}
			putF16(b[80:], topScale/15)
		}
		if topMin > 0 {
			k := 15 / topMin
			for sb := range 16 {
				sc[sb] |= uint8(nearestInt(float32(k*mins[sb]))) << 4
			}
			putF16(b[82:], topMin/15)
		}
		d, dmin := f16At(b[80:]), f16At(b[82:])
		// Re-level with the scales as stored.
		for sb := range 16 {
			ds := d * float32(sc[sb]&0xf)
			if ds == 0 {
				continue
			}
			dm := float32(dmin * float32(sc[sb]>>4))
			for i := 16 * sb; i < 16*sb+16; i++ {
				levels[i] = uint8(max(0, min(maxLevel, nearestInt((x[i]+dm)/ds))))
			}
		}
		packLevels2(b[16:80], &levels)
	}
}

// packLevels2 stores the low 2 bits of 256 levels in the K-quant order:
// within each 128-value half, value i goes to byte i%32, bits 2*(i/32).
func packLevels2(qs []byte, levels *[QK_K]uint8) {
	for half := range 2 {
		l := levels[128*half : 128*half+128]
		q := qs[32*half : 32*half+32]
		for i := range 32 {
			q[i] = l[i]&3 | (l[i+32]&3)<<2 | (l[i+64]&3)<<4 | (l[i+96]&3)<<6
		}
	}
}
