package tensor

import "unsafe"

// Activation quantization: the formats ggml's CPU backend converts the
// float32 activation vector to before taking integer dot products with a
// quantized weight row (its vec_dot_type). They live only in memory, so they
// are Go structs rather than byte layouts; the half-precision scales are
// kept as the float32 value of the stored half, which is what ggml's dot
// products use after GGML_FP16_TO_FP32.

// blockQ8_0 is ggml's block_q8_0 (32 values, half scale).
type blockQ8_0 struct {
	d  float32 // F16ToF32(F32ToF16(amax/127))
	qs [32]int8
}

// blockQ8_1 is ggml's block_q8_1: block_q8_0 plus s = d*sum(qs), as halves.
type blockQ8_1 struct {
	d, s float32
	qs   [32]int8
}

// blockQ8K is ggml's block_q8_K (256 values, float scale, sums of 16).
type blockQ8K struct {
	d     float32
	qs    [QK_K]int8
	bsums [QK_K / 16]int16
	// pqs is qs with each 16-value half-group interleaved as
	// 0,8,1,9,...,7,15, so that a SIMD pairwise multiply-add sums two
	// values of the same mod-8 lane. Filled only when permuteQ8K is set.
	pqs [QK_K]int8
	// bsum2[j] = bsums[2j]+bsums[2j+1] (sums of 32, j < 8; 8..15 zero),
	// filled with pqs.
	bsum2 [16]int16
	// _ puts lqs at offset 608 (19·32) and makes the block 864 bytes
	// (27·32): in a 64-byte aligned buffer (growQ8K) every 32-byte load of
	// lqs is aligned, where at offset 580 about half of them crossed a
	// cache line (the 5-8 vector Q4_K kernels ran 1.2× slower).
	_ [28]byte
	// lqs is qs with each 32-value sub-block grouped by mod-8 lane:
	// lqs[32g+4l+t] = qs[32g+l+8t], so that four consecutive bytes are
	// one lane (the batched Q4_K kernel). Filled with pqs.
	lqs [QK_K]int8
}

// growQ8K is grow for blockQ8K buffers: a new buffer starts on a 64-byte
// boundary, so with the 864-byte block every lqs is 32-byte aligned.
func growQ8K(s []blockQ8K, n int) []blockQ8K {
	if cap(s) >= n {
		return s[:n]
	}
	const size = int(unsafe.Sizeof(blockQ8K{}))
	c := n + n/4
	buf := make([]byte, c*size+63)
	off := int(-uintptr(unsafe.Pointer(unsafe.SliceData(buf))) & 63)
	return unsafe.Slice((*blockQ8K)(unsafe.Pointer(&buf[off])), c)[:n]
}

// permuteQ8K is set when a SIMD kernel reads blockQ8K.pqs.
var permuteQ8K bool

// quantizeQ8_0 is quantize_row_q8_0_ref: d = amax/127, q = roundf(x/d).
func quantizeQ8_0(x []float32, y []blockQ8_0) {
	x = x[:32*len(y)]
	for i := range y {
		xb := (*[32]float32)(x[i*32:])
		var amax float32
		for _, v := range xb {
			amax = max(amax, abs32(v))
		}
		d := amax / 127
		var id float32
		if d != 0 {
			id = 1 / d
		}
		b := &y[i]
		b.d = f16Table[F32ToF16(d)]
		for j, v := range xb {
			b.qs[j] = int8(roundHalfAway(v * id))
		}
	}
}

// quantizeQ8_1 is quantize_row_q8_1_ref.
func quantizeQ8_1(x []float32, y []blockQ8_1) {
	for i := range y {
		xb := x[i*32 : i*32+32]
		var amax float32
		for _, v := range xb {
			amax = max(amax, abs32(v))
		}
		d := amax / 127
		var id float32
		if d != 0 {
			id = 1 / d
		}
		y[i].d = f16Table[F32ToF16(d)]
		var sum int32
		for j := 0; j < 16; j++ {
			q0 := int8(roundHalfAway(xb[j] * id))
			q1 := int8(roundHalfAway(xb[j+16] * id))
			y[i].qs[j], y[i].qs[j+16] = q0, q1
			sum += int32(q0) + int32(q1)
		}
		s := float32(sum) * d
		s = min(65504, max(-65504, s))
		y[i].s = f16Table[F32ToF16(s)]
	}
}

// quantizeQ8K is quantize_row_q8_K_ref: iscale = -127/max (max = the value
// of largest magnitude, with its sign), q = min(127, nearest_int(iscale*x)),
// d = 1/iscale, plus the sums of each group of 16 quants.
func quantizeQ8K(x []float32, y []blockQ8K) {
	if permuteQ8K && q8kBlock != nil {
		x = x[:QK_K*len(y)]
		for i := range y {
			if !q8kBlock((*[QK_K]float32)(x[i*QK_K:]), &y[i]) {
				y[i] = blockQ8K{}
			}
		}
		return
	}
	quantizeQ8KGo(x, y)
}

// q8kBlock, if set, is an assembly quantizeQ8KGo of one block with
// permuteQ8K set, returning false when the block is all zeros (the caller
// clears it then); it is bit-identical (TestQuantizeQ8KAsm).
var q8kBlock func(x *[QK_K]float32, b *blockQ8K) bool

// quantizeQ8KGo is quantizeQ8K in Go.
func quantizeQ8KGo(x []float32, y []blockQ8K) {
	x = x[:QK_K*len(y)]
	for i := range y {
		xb := (*[QK_K]float32)(x[i*QK_K:])
		var mx, amax float32
		for _, v := range xb {
			if av := abs32(v); av > amax {
				amax, mx = av, v
			}
		}
		b := &y[i]
		if amax == 0 {
			*b = blockQ8K{}
			continue
		}
		iscale := -127 / mx
		for j, v := range xb {
			b.qs[j] = int8(min(127, nearestInt(float32(iscale*v))))
		}
		for j := 0; j < QK_K/16; j++ {
			q := (*[16]int8)(b.qs[16*j:])
			var sum int32
			for _, v := range q {
				sum += int32(v)
			}
			b.bsums[j] = int16(sum)
		}
		if permuteQ8K {
			for j := 0; j < 8; j++ {
				b.bsum2[j] = b.bsums[2*j] + b.bsums[2*j+1]
			}
			for g := 0; g < QK_K; g += 16 {
				src := (*[16]int8)(b.qs[g:])
				dst := (*[16]int8)(b.pqs[g:])
				for k := 0; k < 8; k++ {
					dst[2*k] = src[k]
					dst[2*k+1] = src[k+8]
				}
			}
			for g := 0; g < QK_K; g += 32 {
				src := (*[32]int8)(b.qs[g:])
				dst := (*[32]int8)(b.lqs[g:])
				for l := 0; l < 8; l++ {
					dst[4*l], dst[4*l+1], dst[4*l+2], dst[4*l+3] = src[l], src[l+8], src[l+16], src[l+24]
				}
			}
		}
		b.d = 1 / iscale
	}
}
