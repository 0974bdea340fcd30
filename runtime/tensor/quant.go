package tensor

import (
	"encoding/binary"
	"fmt"
	"math"
)

// Weight quantizers: ports of ggml-quants.c quantize_row_*_ref, the
// reference quantizers llama-quantize uses when no importance matrix is
// given, so files we write look like llama.cpp's.

var quantizers = map[Type]func(src []float32, dst []byte){
	F32:  quantF32,
	F16:  quantF16,
	BF16: quantBF16,
	Q4_0: quantQ4_0,
	Q4_1: quantQ4_1,
	Q5_0: quantQ5_0,
	Q5_1: quantQ5_1,
	Q8_0: quantQ8_0,
	Q4_K: quantQ4K,
	Q5_K: quantQ5K,
	Q6_K: quantQ6K,
}

// CanQuantize reports whether Quantize supports t.
func CanQuantize(t Type) bool { _, ok := quantizers[t]; return ok }

// Quantize converts src to type t in ggml layout into dst. len(src) must be
// a multiple of t's block size and len(dst) exactly t.RowSize(len(src)). It
// returns an error for an unsupported type or a size mismatch.
func Quantize(t Type, src []float32, dst []byte) error {
	fn, ok := quantizers[t]
	if !ok {
		return fmt.Errorf("tensor: quantize: unsupported type %s", t)
	}
	n, err := t.RowSize(len(src))
	if err != nil {
		return fmt.Errorf("tensor: quantize: %w", err)
	}
	if n != len(dst) {
		return fmt.Errorf("tensor: quantize: %d %s elements need %d bytes, got %d", len(src), t, n, len(dst))
	}
	fn(src, dst)
	return nil
}

// QuantizeParallel is Quantize split across the pool's threads (p may be
// nil). The K-quant reference quantizers are slow (tens of ns per value,
// their float sums are inherently sequential), so writers of whole models
// should use this. The result is identical to Quantize.
func QuantizeParallel(p *Pool, t Type, src []float32, dst []byte) error {
	fn, ok := quantizers[t]
	if !ok {
		return fmt.Errorf("tensor: quantize: unsupported type %s", t)
	}
	n, err := t.RowSize(len(src))
	if err != nil {
		return fmt.Errorf("tensor: quantize: %w", err)
	}
	if n != len(dst) {
		return fmt.Errorf("tensor: quantize: %d %s elements need %d bytes, got %d", len(src), t, n, len(dst))
	}
	bs, ts := t.BlockSize(), t.TypeSize()
	// Work in groups of blocks of about 4096 values.
	per := max(1, 4096/bs)
	nblocks := len(src) / bs
	p.parallel((nblocks+per-1)/per, func(lo, hi int) {
		b0, b1 := lo*per, min(hi*per, nblocks)
		fn(src[b0*bs:b1*bs], dst[b0*ts:b1*ts])
	})
	return nil
}

func putF16(b []byte, f float32) { binary.LittleEndian.PutUint16(b, F32ToF16(f)) }

func quantF32(src []float32, dst []byte) {
	for i, v := range src {
		binary.LittleEndian.PutUint32(dst[4*i:], math.Float32bits(v))
	}
}

func quantF16(src []float32, dst []byte) {
	for i, v := range src {
		binary.LittleEndian.PutUint16(dst[2*i:], F32ToF16(v))
	}
}

func quantBF16(src []float32, dst []byte) {
	for i, v := range src {
		binary.LittleEndian.PutUint16(dst[2*i:], F32ToBF16(v))
	}
}

// absMax returns the value of largest magnitude (first one on ties) and its
// magnitude.
func absMax(x []float32) (mx, amax float32) { //nolint:unparam // amax is the loop state; callers need only mx
	for _, v := range x {
		if av := abs32(v); amax < av {
			amax, mx = av, v
		}
	}
	return
}

func quantQ4_0(src []float32, dst []byte) {
	for ib := 0; ib < len(src)/32; ib++ {
		x := src[ib*32 : ib*32+32]
		b := dst[ib*18 : ib*18+18]
		mx, _ := absMax(x)
		d := mx / -8
		var id float32
		if d != 0 {
			id = 1 / d
		}
		putF16(b, d)
		for j := 0; j < 16; j++ {
			xi0 := min(15, int8(float32(x[j]*id)+8.5))
			xi1 := min(15, int8(float32(x[j+16]*id)+8.5))
			b[2+j] = uint8(xi0) | uint8(xi1)<<4
		}
	}
}

func quantQ4_1(src []float32, dst []byte) {
	for ib := 0; ib < len(src)/32; ib++ {
		x := src[ib*32 : ib*32+32]
		b := dst[ib*20 : ib*20+20]
		mn, mx := float32(math.MaxFloat32), float32(-math.MaxFloat32)
		for _, v := range x {
			mn, mx = min(mn, v), max(mx, v)
		}
		d := (mx - mn) / 15
		var id float32
		if d != 0 {
			id = 1 / d
		}
		putF16(b, d)
		putF16(b[2:], mn)
		for j := 0; j < 16; j++ {
			xi0 := min(15, int8(float32((x[j]-mn)*id)+0.5))
			xi1 := min(15, int8(float32((x[j+16]-mn)*id)+0.5))
			b[4+j] = uint8(xi0) | uint8(xi1)<<4
		}
	}
}

func quantQ5_0(src []float32, dst []byte) {
	for ib := 0; ib < len(src)/32; ib++ {
		x := src[ib*32 : ib*32+32]
		b := dst[ib*22 : ib*22+22]
		mx, _ := absMax(x)
		d := mx / -16
		var id float32
		if d != 0 {
			id = 1 / d
		}
		putF16(b, d)
		var qh uint32
		for j := 0; j < 16; j++ {
			xi0 := uint8(min(31, int8(float32(x[j]*id)+16.5)))
			xi1 := uint8(min(31, int8(float32(x[j+16]*id)+16.5)))
			b[6+j] = xi0&0xf | (xi1&0xf)<<4
			qh |= uint32(xi0&0x10) >> 4 << j
			qh |= uint32(xi1&0x10) >> 4 << (j + 16)
		}
		binary.LittleEndian.PutUint32(b[2:], qh)
	}
}

func quantQ5_1(src []float32, dst []byte) {
	for ib := 0; ib < len(src)/32; ib++ {
		x := src[ib*32 : ib*32+32]
		b := dst[ib*24 : ib*24+24]
		mn, mx := float32(math.MaxFloat32), float32(-math.MaxFloat32)
		for _, v := range x {
			mn, mx = min(mn, v), max(mx, v)
		}
		d := (mx - mn) / 31
		var id float32
		if d != 0 {
			id = 1 / d
		}
		putF16(b, d)
		putF16(b[2:], mn)
		var qh uint32
		for j := 0; j < 16; j++ {
			xi0 := uint8(float32((x[j]-mn)*id) + 0.5)
			xi1 := uint8(float32((x[j+16]-mn)*id) + 0.5)
			b[8+j] = xi0&0xf | (xi1&0xf)<<4
			qh |= uint32(xi0&0x10) >> 4 << j
			qh |= uint32(xi1&0x10) >> 4 << (j + 16)
		}
		binary.LittleEndian.PutUint32(b[4:], qh)
	}
}

func quantQ8_0(src []float32, dst []byte) {
	for ib := 0; ib < len(src)/32; ib++ {
		x := src[ib*32 : ib*32+32]
		b := dst[ib*34 : ib*34+34]
		var amax float32
		for _, v := range x {
			amax = max(amax, abs32(v))
		}
		d := amax / 127
		var id float32
		if d != 0 {
			id = 1 / d
		}
		putF16(b, d)
		for j, v := range x {
			b[2+j] = uint8(int8(roundHalfAway(v * id)))
		}
	}
}

const groupMaxEps = 1e-15

// makeQkx2Quants is ggml's make_qkx2_quants for 32 values (the only size
// Q4_K/Q5_K use): an asymmetric (scale, min) fit of x to levels 0..nmax
// minimising weighted error over nstep+1 trial scales. It returns the scale
// and -min. Fixed-size arrays keep the hot loops free of bounds checks.
func makeQkx2Quants(nmax int, x, weights *[32]float32, L, Laux *[32]uint8, rmin, rdelta float32, nstep int, useMad bool) (scale, theMin float32) {
	const n = 32
	mn, mx := x[0], x[0]
	sumW := weights[0]
	sumX := float32(sumW * x[0])
	for i := 1; i < n; i++ {
		mn = min(mn, x[i])
		mx = max(mx, x[i])
		w := weights[i]
		sumW += w
		sumX += float32(w * x[i])
	}
	if mn > 0 {
		mn = 0
	}
	if mx == mn {
		*L = [32]uint8{}
		return 0, -mn
	}
	nm := int32(nmax)
	iscale := float32(nmax) / (mx - mn)
	scale = 1 / iscale
	var bestError float32
	for i := 0; i < n; i++ {
		l := nearestInt(float32(iscale * (x[i] - mn)))
		L[i] = uint8(max(0, min(nm, l)))
		diff := float32(float32(scale*float32(L[i]))+mn) - x[i]
		if useMad {
			diff = abs32(diff)
		} else {
			diff = float32(diff * diff)
		}
		bestError += float32(weights[i] * diff)
	}
	if nstep < 1 {
		return scale, -mn
	}
	// x - min, hoisted out of the trial loop; recomputed whenever a better
	// fit moves min (ggml uses the updated min in later trials).
	var xm [32]float32
	for i := 0; i < n; i++ {
		xm[i] = x[i] - mn
	}
	for is := 0; is <= nstep; is++ {
		iscale = float32(float32(rmin+float32(rdelta*float32(is)))+float32(nmax)) / (mx - mn)
		var sumL, sumL2, sumXL float32
		for i := 0; i < n; i++ {
			l := nearestInt(float32(iscale * xm[i]))
			l = max(0, min(nm, l))
			Laux[i] = uint8(l)
			w := weights[i]
			fl := float32(l)
			wl := float32(w * fl)
			sumL += wl
			sumL2 += float32(wl * fl)
			sumXL += float32(wl * x[i])
		}
		D := float32(sumW*sumL2) - float32(sumL*sumL)
		if D > 0 {
			thisScale := (float32(sumW*sumXL) - float32(sumX*sumL)) / D
			thisMin := (float32(sumL2*sumX) - float32(sumL*sumXL)) / D
			if thisMin > 0 {
				thisMin = 0
				thisScale = sumXL / sumL2
			}
			var curError float32
			for i := 0; i < n; i++ {
				diff := float32(float32(thisScale*float32(Laux[i]))+thisMin) - x[i]
				if useMad {
					diff = abs32(diff)
				} else {
					diff = float32(diff * diff)
				}
				curError += float32(weights[i] * diff)
			}
			if curError < bestError {
				*L = *Laux
				bestError = curError
				scale = thisScale
				mn = thisMin
				for i := 0; i < n; i++ {
					xm[i] = x[i] - mn
				}
			}
		}
	}
	return scale, -mn
}

// makeQxQuants is ggml's make_qx_quants: a symmetric fit of x to levels
// -nmax..nmax-1 (stored biased by nmax in L). qw may be nil.
func makeQxQuants(n, nmax int, x []float32, L []int8, rmseType int, qw []float32) float32 {
	var mx, amax float32
	for i := 0; i < n; i++ {
		if ax := abs32(x[i]); ax > amax {
			amax, mx = ax, x[i]
		}
	}
	if amax < groupMaxEps {
		for i := 0; i < n; i++ {
			L[i] = 0
		}
		return 0
	}
	nm := int32(nmax)
	iscale := -float32(nmax) / mx
	if rmseType == 0 {
		for i := 0; i < n; i++ {
			l := nearestInt(float32(iscale * x[i]))
			L[i] = int8(nm + max(-nm, min(nm-1, l)))
		}
		return 1 / iscale
	}
	returnEarly := false
	if rmseType < 0 {
		rmseType = -rmseType
		returnEarly = true
	}
	weight := func(i int) float32 {
		switch {
		case qw != nil:
			return qw[i]
		case rmseType == 1:
			return float32(x[i] * x[i])
		case rmseType == 2:
			return 1
		case rmseType == 3:
			return abs32(x[i])
		}
		return float32(math.Sqrt(float64(abs32(x[i]))))
	}
	var sumlx, suml2 float32
	for i := 0; i < n; i++ {
		l := nearestInt(float32(iscale * x[i]))
		l = max(-nm, min(nm-1, l))
		L[i] = int8(l + nm)
		w := weight(i)
		fl := float32(l)
		sumlx += float32(float32(w*x[i]) * fl)
		suml2 += float32(float32(w*fl) * fl)
	}
	var scale float32
	if suml2 != 0 {
		scale = sumlx / suml2
	}
	if returnEarly {
		if suml2 > 0 {
			return 0.5 * (scale + 1/iscale)
		}
		return 1 / iscale
	}
	best := float32(scale * sumlx)
	for is := -9; is <= 9; is++ {
		if is == 0 {
			continue
		}
		iscale = -(float32(nmax) + float32(0.1*float32(is))) / mx
		sumlx, suml2 = 0, 0
		for i := 0; i < n; i++ {
			l := nearestInt(float32(iscale * x[i]))
			l = max(-nm, min(nm-1, l))
			w := weight(i)
			fl := float32(l)
			sumlx += float32(float32(w*x[i]) * fl)
			suml2 += float32(float32(w*fl) * fl)
		}
		if suml2 > 0 && float32(sumlx*sumlx) > float32(best*suml2) {
			for i := 0; i < n; i++ {
				l := nearestInt(float32(iscale * x[i]))
				L[i] = int8(nm + max(-nm, min(nm-1, l)))
			}
			scale = sumlx / suml2
			best = float32(scale * sumlx)
		}
	}
	return scale
}

// quantKScalesMins is the shared Q4_K/Q5_K super-block quantizer
// (quantize_row_q4_K_ref / q5_K_ref): 8 sub-blocks of 32 with 6-bit scales
// and mins. It fills the d, dmin and scales bytes of b and returns the
// levels L (0..nmax) of the 256 values.
func quantKScalesMins(x []float32, b []byte, nmax int, rmin, rdelta float32, nstep int, L *[QK_K]uint8) {
	var mins, scales [QK_K / 32]float32
	var weights [32]float32
	var Laux [32]uint8
	var maxScale, maxMin float32
	for j := 0; j < QK_K/32; j++ {
		xs := x[32*j : 32*j+32]
		var sumX2 float32
		for _, v := range xs {
			sumX2 += float32(v * v)
		}
		avX := float32(math.Sqrt(float64(sumX2 / 32)))
		for l, v := range xs {
			weights[l] = avX + abs32(v)
		}
		scales[j], mins[j] = makeQkx2Quants(nmax, (*[32]float32)(xs), &weights, (*[32]uint8)(L[32*j:]), &Laux, rmin, rdelta, nstep, false)
		maxScale = max(maxScale, scales[j])
		maxMin = max(maxMin, mins[j])
	}
	var invScale, invMin float32
	if maxScale > 0 {
		invScale = 63 / maxScale
	}
	if maxMin > 0 {
		invMin = 63 / maxMin
	}
	sc := b[4:16]
	for i := range sc {
		sc[i] = 0
	}
	for j := 0; j < QK_K/32; j++ {
		ls := min(63, uint8(nearestInt(float32(invScale*scales[j]))))
		lm := min(63, uint8(nearestInt(float32(invMin*mins[j]))))
		if j < 4 {
			sc[j] = ls
			sc[j+4] = lm
		} else {
			sc[j+4] = ls&0xf | (lm&0xf)<<4
			sc[j-4] |= (ls >> 4) << 6
			sc[j] |= (lm >> 4) << 6
		}
	}
	putF16(b, maxScale/63)
	putF16(b[2:], maxMin/63)
	dAll, dMin := f16At(b), f16At(b[2:])
	for j := 0; j < QK_K/32; j++ {
		s, m := scaleMinK4(j, sc)
		d := dAll * float32(s)
		if d == 0 {
			continue
		}
		dm := float32(dMin * float32(m))
		for ii := 0; ii < 32; ii++ {
			l := nearestInt((x[32*j+ii] + dm) / d)
			L[32*j+ii] = uint8(max(0, min(int32(nmax), l)))
		}
	}
}

func quantQ4K(src []float32, dst []byte) {
	var L [QK_K]uint8
	for ib := 0; ib < len(src)/QK_K; ib++ {
		x := src[ib*QK_K : ib*QK_K+QK_K]
		b := dst[ib*144 : ib*144+144]
		quantKScalesMins(x, b, 15, -1, 0.1, 20, &L)
		q := b[16:144]
		for j := 0; j < QK_K; j += 64 {
			for l := 0; l < 32; l++ {
				q[l] = L[j+l] | L[j+l+32]<<4
			}
			q = q[32:]
		}
	}
}

func quantQ5K(src []float32, dst []byte) {
	var L [QK_K]uint8
	for ib := 0; ib < len(src)/QK_K; ib++ {
		x := src[ib*QK_K : ib*QK_K+QK_K]
		b := dst[ib*176 : ib*176+176]
		quantKScalesMins(x, b, 31, -0.5, 0.1, 15, &L)
		qh := b[16:48]
		ql := b[48:176]
		for i := range qh {
			qh[i] = 0
		}
		m1, m2 := uint8(1), uint8(2)
		for n := 0; n < QK_K; n += 64 {
			for j := 0; j < 32; j++ {
				l1 := L[n+j]
				if l1 > 15 {
					l1 -= 16
					qh[j] |= m1
				}
				l2 := L[n+j+32]
				if l2 > 15 {
					l2 -= 16
					qh[j] |= m2
				}
				ql[j] = l1 | l2<<4
			}
			m1 <<= 2
			m2 <<= 2
			ql = ql[32:]
		}
	}
}

func quantQ6K(src []float32, dst []byte) {
	var L [QK_K]int8
	var scales [QK_K / 16]float32
	for ib := 0; ib < len(src)/QK_K; ib++ {
		x := src[ib*QK_K : ib*QK_K+QK_K]
		b := dst[ib*210 : ib*210+210]
		var maxScale, maxAbsScale float32
		for j := 0; j < QK_K/16; j++ {
			s := makeQxQuants(16, 32, x[16*j:16*j+16], L[16*j:16*j+16], 1, nil)
			scales[j] = s
			if as := abs32(s); as > maxAbsScale {
				maxAbsScale, maxScale = as, s
			}
		}
		if maxAbsScale < groupMaxEps {
			for i := range b {
				b[i] = 0
			}
			continue
		}
		iscale := -128 / maxScale
		putF16(b[208:], 1/iscale)
		sc := b[192:208]
		for j := 0; j < QK_K/16; j++ {
			sc[j] = uint8(int8(min(127, nearestInt(float32(iscale*scales[j])))))
		}
		dAll := f16At(b[208:])
		for j := 0; j < QK_K/16; j++ {
			d := dAll * float32(int8(sc[j]))
			if d == 0 {
				continue
			}
			for ii := 0; ii < 16; ii++ {
				l := nearestInt(x[16*j+ii] / d)
				L[16*j+ii] = int8(max(-32, min(31, l)) + 32)
			}
		}
		ql := b[0:128]
		qh := b[128:192]
		for j := 0; j < QK_K; j += 128 {
			for l := 0; l < 32; l++ {
				q1 := uint8(L[j+l]) & 0xf
				q2 := uint8(L[j+l+32]) & 0xf
				q3 := uint8(L[j+l+64]) & 0xf
				q4 := uint8(L[j+l+96]) & 0xf
				ql[l] = q1 | q3<<4
				ql[l+32] = q2 | q4<<4
				qh[l] = uint8(L[j+l])>>4 | (uint8(L[j+l+32])>>4)<<2 | (uint8(L[j+l+64])>>4)<<4 | (uint8(L[j+l+96])>>4)<<6
			}
			ql = ql[64:]
			qh = qh[32:]
		}
	}
}
