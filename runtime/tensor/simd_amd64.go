//go:build goexperiment.simd && amd64

package tensor

import (
	"encoding/binary"
	"simd/archsimd"
	"unsafe"
)

// AVX2 kernels through simd/archsimd (GOEXPERIMENT=simd). The integer
// kernels compute exactly the same per-block integer sums as the generic
// ports (for the K-quants: the 8 lane sums, lane = element index mod 8, held
// in one Int32x8) and then run the identical scalar float combination, so
// they are bit-identical to dot_generic.go. F32 reorders its float sum
// (4 vector accumulators) and is tested within a tolerance.

func simdKernels() map[Type]*kernel {
	if !archsimd.X86.AVX2() {
		return nil
	}
	permuteQ8K = true
	return map[Type]*kernel{
		F32:  {act: actF32, impl: "avx2", exact: false, f32: dotF32AVX2},
		F16:  {act: actF16, impl: "avx2", exact: true, f32: dotF16AVX2},
		BF16: {act: actBF16, impl: "avx2", exact: true, f32: dotBF16AVX2},
		Q8_0: {act: actQ8_0, impl: "avx2", exact: true, q80: dotQ8_0Q8_0AVX2},
		Q4_0: {act: actQ8_0, impl: "avx2", exact: true, q80: dotQ4_0Q8_0AVX2},
		Q5_0: {act: actQ8_0, impl: "avx2", exact: true, q80: dotQ5_0Q8_0AVX2},
		Q4_K: {act: actQ8K, impl: "avx2", exact: true, q8k: dotQ4KQ8KMadd},
		Q5_K: {act: actQ8K, impl: "avx2", exact: true, q8k: dotQ5KQ8KAVX2},
		Q6_K: {act: actQ8K, impl: "avx2", exact: true, q8k: dotQ6KQ8KMadd},
	}
}

func dotF32AVX2(w []byte, x []float32) float32 {
	n := len(x)
	w = w[:4*n]
	if n < 8 {
		return dotF32Fast(w, x)
	}
	// Bounds are established above; the loop walks raw pointers so the
	// compiler emits no per-iteration slice checks.
	pw, px := unsafe.Pointer(&w[0]), unsafe.Pointer(&x[0])
	ld := func(p unsafe.Pointer, i int) archsimd.Float32x8 {
		return archsimd.LoadFloat32x8((*[8]float32)(unsafe.Add(p, 4*i)))
	}
	var a0, a1, a2, a3 archsimd.Float32x8
	i := 0
	for ; i+32 <= n; i += 32 {
		a0 = a0.Add(ld(pw, i).Mul(ld(px, i)))
		a1 = a1.Add(ld(pw, i+8).Mul(ld(px, i+8)))
		a2 = a2.Add(ld(pw, i+16).Mul(ld(px, i+16)))
		a3 = a3.Add(ld(pw, i+24).Mul(ld(px, i+24)))
	}
	for ; i+8 <= n; i += 8 {
		a0 = a0.Add(ld(pw, i).Mul(ld(px, i)))
	}
	var s [8]float32
	a0.Add(a1).Add(a2.Add(a3)).Store(&s)
	r := reduce8(s[0], s[1], s[2], s[3], s[4], s[5], s[6], s[7])
	for ; i < n; i++ {
		r += float32(f32At(w[4*i:]) * x[i])
	}
	return r
}

func f32At(b []byte) float32 { return *(*float32)(unsafe.Pointer(&b[0])) }

func u8x16(b []byte) archsimd.Uint8x16 { return archsimd.LoadUint8x16((*[16]byte)(b)) }
func i8x16(q []int8) archsimd.Int16x16 { return archsimd.LoadInt8x16((*[16]int8)(q)).ExtendToInt16() }

// hsum32 adds the 8 lanes of v (exact integer sum).
func hsum32(v archsimd.Int32x8) int32 {
	t := v.GetLo().Add(v.GetHi())
	t = t.AddPairs(t)
	t = t.AddPairs(t)
	return t.GetElem(0)
}

func dotQ8_0Q8_0AVX2(w []byte, y []blockQ8_0) float32 {
	w = w[:34*len(y)]
	var sumf float32
	for ib := range y {
		b := w[ib*34 : ib*34+34]
		q := y[ib].qs[:]
		x0 := u8x16(b[2:18]).AsInt8x16().ExtendToInt16()
		x1 := u8x16(b[18:34]).AsInt8x16().ExtendToInt16()
		s := x0.DotProductPairs(i8x16(q[0:16])).Add(x1.DotProductPairs(i8x16(q[16:32])))
		sumi := hsum32(s)
		sumf += float32(float32(sumi) * float32(f16Table[binary.LittleEndian.Uint16(b)]*y[ib].d))
	}
	return sumf
}

func dotQ4_0Q8_0AVX2(w []byte, y []blockQ8_0) float32 {
	w = w[:18*len(y)]
	m4 := archsimd.BroadcastUint8x16(0x0f)
	off := archsimd.BroadcastInt16x16(8)
	var sumf float32
	for ib := range y {
		b := w[ib*18 : ib*18+18]
		q := y[ib].qs[:]
		v := u8x16(b[2:18])
		lo := v.And(m4).ExtendToUint16().AsInt16x16().Sub(off)
		hi := v.AsUint16x8().ShiftAllRight(4).AsUint8x16().And(m4).ExtendToUint16().AsInt16x16().Sub(off)
		s := lo.DotProductPairs(i8x16(q[0:16])).Add(hi.DotProductPairs(i8x16(q[16:32])))
		sumi := hsum32(s)
		sumf += float32(float32(float32(sumi)*f16Table[binary.LittleEndian.Uint16(b)]) * y[ib].d)
	}
	return sumf
}

// lane8 folds 16 int16 lanes (elements k and k+8 of a group) into the 8
// mod-8 lanes, widened to int32.
func lane8(v archsimd.Int16x16) archsimd.Int32x8 {
	return v.GetLo().Add(v.GetHi()).ExtendToInt32()
}

func dotQ5KQ8KAVX2(w []byte, y []blockQ8K) float32 {
	w = w[:176*len(y)]
	m4 := archsimd.BroadcastUint8x16(0x0f)
	one := archsimd.BroadcastUint8x16(1)
	var sums [8]float32
	var sumf float32
	var aux [8]int32
	for i := range y {
		b := (*[176]byte)(w[i*176:])
		yb := &y[i]
		sc, mn := kScales((*[12]byte)(b[4:]))
		var sumi int32
		for j := 0; j < 8; j++ {
			sumi += (int32(yb.bsums[2*j]) + int32(yb.bsums[2*j+1])) * mn[j]
		}
		h0 := u8x16(b[16:32])
		h1 := u8x16(b[32:48])
		var acc archsimd.Int32x8
		for j := 0; j < 4; j++ {
			q0 := u8x16(b[48+32*j : 64+32*j])
			q1 := u8x16(b[64+32*j : 80+32*j])
			q8 := yb.qs[64*j : 64*j+64]
			// fifth bits: bit 2j (low nibbles) and 2j+1 (high nibbles) of qh,
			// moved to bit 4.
			sl, sh := uint64(2*j), uint64(2*j+1)
			hb0l := h0.AsUint16x8().ShiftAllRight(sl).AsUint8x16().And(one).AsUint16x8().ShiftAllLeft(4).AsUint8x16()
			hb1l := h1.AsUint16x8().ShiftAllRight(sl).AsUint8x16().And(one).AsUint16x8().ShiftAllLeft(4).AsUint8x16()
			hb0h := h0.AsUint16x8().ShiftAllRight(sh).AsUint8x16().And(one).AsUint16x8().ShiftAllLeft(4).AsUint8x16()
			hb1h := h1.AsUint16x8().ShiftAllRight(sh).AsUint8x16().And(one).AsUint16x8().ShiftAllLeft(4).AsUint8x16()
			lo := q0.And(m4).Or(hb0l).ExtendToUint16().AsInt16x16().Mul(i8x16(q8[0:16])).
				Add(q1.And(m4).Or(hb1l).ExtendToUint16().AsInt16x16().Mul(i8x16(q8[16:32])))
			hi := q0.AsUint16x8().ShiftAllRight(4).AsUint8x16().And(m4).Or(hb0h).ExtendToUint16().AsInt16x16().Mul(i8x16(q8[32:48])).
				Add(q1.AsUint16x8().ShiftAllRight(4).AsUint8x16().And(m4).Or(hb1h).ExtendToUint16().AsInt16x16().Mul(i8x16(q8[48:64])))
			acc = acc.Add(lane8(lo).Mul(archsimd.BroadcastInt32x8(sc[2*j])))
			acc = acc.Add(lane8(hi).Mul(archsimd.BroadcastInt32x8(sc[2*j+1])))
		}
		acc.Store(&aux)
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

// interleave is the VPSHUFB index vector that reorders each 16-byte group
// as 0,8,1,9,...,7,15 (matching blockQ8K.pqs).
var interleave = func() archsimd.Int8x32 {
	var ix [32]int8
	for g := 0; g < 32; g += 16 {
		for k := 0; k < 8; k++ {
			ix[g+2*k] = int8(k)
			ix[g+2*k+1] = int8(k + 8)
		}
	}
	return archsimd.LoadInt8x32(&ix)
}()

// madd8 multiplies 32 unsigned weights (in natural order) with the
// interleaved activations pq pairwise (VPMADDUBSW; no saturation is possible
// for weights <= 63) and returns the 16 int16 sums, each of two values of the
// same mod-8 lane: lanes 0-7 from the first 16 values, 8-15 from the rest.
func madd8(w archsimd.Uint8x32, pq *[32]int8) archsimd.Int16x16 {
	return w.PermuteOrZeroGrouped(interleave).DotProductPairsSaturated(archsimd.LoadInt8x32(pq))
}

// dotQ4KQ8KMadd is dotQ4KQ8KGeneric with VPMADDUBSW on interleaved values
// (identical integer lane sums), the mins term as
// one VPMADDWD, and the per-lane float update vectorised (same mul-then-add
// per lane as the scalar code, so still bit-identical).
func dotQ4KQ8KMadd(w []byte, y []blockQ8K) float32 {
	w = w[:144*len(y)]
	m4 := archsimd.BroadcastUint8x32(0x0f)
	var sumsV archsimd.Float32x8
	var sumf float32
	var sc [8]int32
	var mb [16]byte
	for i := range y {
		b := (*[144]byte)(w[i*144:])
		yb := &y[i]
		u0 := binary.LittleEndian.Uint32(b[4:])
		u1 := binary.LittleEndian.Uint32(b[8:])
		u2 := binary.LittleEndian.Uint32(b[12:])
		s0 := u0 & 0x3f3f3f3f
		s1 := (u2 & 0x0f0f0f0f) | ((u0>>6)&0x03030303)<<4
		binary.LittleEndian.PutUint32(mb[0:], u1&0x3f3f3f3f)
		binary.LittleEndian.PutUint32(mb[4:], ((u2>>4)&0x0f0f0f0f)|((u1>>6)&0x03030303)<<4)
		sc[0], sc[1], sc[2], sc[3] = int32(s0&0xff), int32(s0>>8&0xff), int32(s0>>16&0xff), int32(s0>>24)
		sc[4], sc[5], sc[6], sc[7] = int32(s1&0xff), int32(s1>>8&0xff), int32(s1>>16&0xff), int32(s1>>24)
		mins := archsimd.LoadUint8x16(&mb).ExtendToUint16().AsInt16x16()
		sumi := hsum32(mins.DotProductPairs(archsimd.LoadInt16x16(&yb.bsum2)))
		var acc archsimd.Int32x8
		for j := 0; j < 4; j++ {
			q := archsimd.LoadUint8x32((*[32]byte)(b[16+32*j:]))
			lo := madd8(q.And(m4), (*[32]int8)(yb.pqs[64*j:]))
			hi := madd8(q.AsUint16x16().ShiftAllRight(4).AsUint8x32().And(m4), (*[32]int8)(yb.pqs[64*j+32:]))
			acc = acc.Add(lane8(lo).Mul(archsimd.BroadcastInt32x8(sc[2*j])))
			acc = acc.Add(lane8(hi).Mul(archsimd.BroadcastInt32x8(sc[2*j+1])))
		}
		d := f16Table[binary.LittleEndian.Uint16(b[0:])] * yb.d
		sumsV = sumsV.Add(acc.ConvertToFloat32().Mul(archsimd.BroadcastFloat32x8(d)))
		dmin := f16Table[binary.LittleEndian.Uint16(b[2:])] * yb.d
		sumf -= float32(dmin * float32(sumi))
	}
	var sums [8]float32
	sumsV.Store(&sums)
	for l := 0; l < 8; l++ {
		sumf += sums[l]
	}
	return sumf
}

// dotQ6KQ8KMadd is dotQ6KQ8KGeneric with VPMADDUBSW: the 6-bit values are
// multiplied unsigned (0..63) and 32·(pair sum of activations) is subtracted
// per int16 lane, giving the same lane sums as (value-32)·q8.
func dotQ6KQ8KMadd(w []byte, y []blockQ8K) float32 {
	w = w[:210*len(y)]
	m4 := archsimd.BroadcastUint8x32(0x0f)
	m3 := archsimd.BroadcastUint8x32(3)
	c32 := archsimd.BroadcastUint8x32(32)
	var sumsV archsimd.Float32x8
	var sumf float32
	for i := range y {
		b := (*[210]byte)(w[i*210:])
		yb := &y[i]
		var acc archsimd.Int32x8
		for n := 0; n < 2; n++ {
			ql := b[64*n : 64*n+64]
			sc := b[192+8*n : 192+8*n+8]
			l0 := archsimd.LoadUint8x32((*[32]byte)(ql[0:]))
			l1 := archsimd.LoadUint8x32((*[32]byte)(ql[32:]))
			hh := archsimd.LoadUint8x32((*[32]byte)(b[128+32*n:])).AsUint16x16()
			for k := 0; k < 4; k++ {
				src := l0
				if k&1 != 0 {
					src = l1
				}
				if k >= 2 {
					src = src.AsUint16x16().ShiftAllRight(4).AsUint8x32()
				}
				hb := hh.ShiftAllRight(uint64(2 * k)).AsUint8x32().And(m3).AsUint16x16().ShiftAllLeft(4).AsUint8x32()
				pq := (*[32]int8)(yb.pqs[128*n+32*k:])
				p := madd8(src.And(m4).Or(hb), pq).Sub(c32.DotProductPairsSaturated(archsimd.LoadInt8x32(pq)))
				acc = acc.Add(p.GetLo().ExtendToInt32().Mul(archsimd.BroadcastInt32x8(int32(int8(sc[2*k])))))
				acc = acc.Add(p.GetHi().ExtendToInt32().Mul(archsimd.BroadcastInt32x8(int32(int8(sc[2*k+1])))))
			}
		}
		d := f16Table[binary.LittleEndian.Uint16(b[208:])] * yb.d
		sumsV = sumsV.Add(acc.ConvertToFloat32().Mul(archsimd.BroadcastFloat32x8(d)))
	}
	var sums [8]float32
	sumsV.Store(&sums)
	for l := 0; l < 8; l++ {
		sumf += sums[l]
	}
	return sumf
}

// f16Consts are the constants of f16x8, hoisted out of loops.
type f16Consts struct {
	signMask, expOffset, magic, expMask archsimd.Uint32x8
	expScale, magicBias                 archsimd.Float32x8
}

func newF16Consts() f16Consts {
	return f16Consts{
		signMask:  archsimd.BroadcastUint32x8(0x80000000),
		expOffset: archsimd.BroadcastUint32x8(0xe0 << 23),
		magic:     archsimd.BroadcastUint32x8(126 << 23),
		expMask:   archsimd.BroadcastUint32x8(0x7c00),
		expScale:  archsimd.BroadcastFloat32x8(0x1.0p-112),
		magicBias: archsimd.BroadcastFloat32x8(0.5),
	}
}

// f16x8 converts 8 little-endian halves to float32 exactly (the branch-free
// FP16 conversion ggml uses without F16C: scale the shifted bits for normal
// values, a magic-number subtraction for subnormals).
func (c *f16Consts) f16x8(b []byte) archsimd.Float32x8 {
	return c.f16x8p(unsafe.Pointer(&b[0]))
}

func (c *f16Consts) f16x8p(p unsafe.Pointer) archsimd.Float32x8 {
	h := archsimd.LoadUint16x8((*[8]uint16)(p)).ExtendToUint32()
	w := h.ShiftAllLeft(16)
	sign := w.And(c.signMask)
	twoW := w.Add(w)
	norm := twoW.ShiftAllRight(4).Add(c.expOffset).AsFloat32x8().Mul(c.expScale).AsUint32x8()
	denorm := twoW.ShiftAllRight(17).Or(c.magic).AsFloat32x8().Sub(c.magicBias).AsUint32x8()
	isDenorm := h.And(c.expMask).AsInt32x8().Equal(archsimd.Int32x8{})
	return denorm.Merge(norm, isDenorm).Or(sign).AsFloat32x8()
}

// dotF16AVX2 is dotF16Generic with the weights converted 8 at a time; one
// accumulator keeps the generic lane order, so it is bit-identical.
func dotF16AVX2(w []byte, x []float32) float32 {
	n := len(x)
	w = w[:2*n]
	if n < 8 {
		return dotF16Fast(w, x)
	}
	c := newF16Consts()
	pw, px := unsafe.Pointer(&w[0]), unsafe.Pointer(&x[0])
	var acc archsimd.Float32x8
	i := 0
	for ; i+8 <= n; i += 8 {
		acc = acc.Add(c.f16x8p(unsafe.Add(pw, 2*i)).Mul(archsimd.LoadFloat32x8((*[8]float32)(unsafe.Add(px, 4*i)))))
	}
	var s [8]float32
	acc.Store(&s)
	r := reduce8(s[0], s[1], s[2], s[3], s[4], s[5], s[6], s[7])
	for ; i < n; i++ {
		r += float32(f16Table[binary.LittleEndian.Uint16(w[2*i:])] * x[i])
	}
	return r
}

// dotBF16AVX2 is dotBF16Generic 8 values at a time (bfloat16 → float32 is
// a 16-bit shift); one accumulator keeps the generic order: bit-identical.
func dotBF16AVX2(w []byte, x []float32) float32 {
	n := len(x)
	w = w[:2*n]
	if n < 8 {
		return dotBF16Fast(w, x)
	}
	pw, px := unsafe.Pointer(&w[0]), unsafe.Pointer(&x[0])
	var acc archsimd.Float32x8
	i := 0
	for ; i+8 <= n; i += 8 {
		v := archsimd.LoadUint16x8((*[8]uint16)(unsafe.Add(pw, 2*i))).ExtendToUint32().ShiftAllLeft(16).AsFloat32x8()
		acc = acc.Add(v.Mul(archsimd.LoadFloat32x8((*[8]float32)(unsafe.Add(px, 4*i)))))
	}
	var s [8]float32
	acc.Store(&s)
	r := reduce8(s[0], s[1], s[2], s[3], s[4], s[5], s[6], s[7])
	for ; i < n; i++ {
		r += float32(BF16ToF32(binary.LittleEndian.Uint16(w[2*i:])) * x[i])
	}
	return r
}

// q5Idx and q5Bit are the shuffle and bit-select vectors that expand a Q5_0
// block's 32 high bits into bytes.
var q5Idx, q5Bit = func() (lo, bit archsimd.Int8x16) {
	var ix, bs [16]int8
	for i := range 16 {
		ix[i] = int8(i / 8)
		bs[i] = int8(uint8(1) << (i % 8))
	}
	return archsimd.LoadInt8x16(&ix), archsimd.LoadInt8x16(&bs)
}()

// dotQ5_0Q8_0AVX2 is dotQ5_0Q8_0Generic: the fifth bits are expanded to
// byte masks (shuffle + compare), and value-16 is formed as
// nibble | (^bit & 0xF0) (the same int8). Integer block sums are exact and
// the float step is the generic one.
func dotQ5_0Q8_0AVX2(w []byte, y []blockQ8_0) float32 {
	w = w[:22*len(y)]
	m4 := archsimd.BroadcastUint8x16(0x0f)
	mf0 := archsimd.BroadcastUint8x16(0xf0)
	bit := q5Bit.AsUint8x16()
	idxHi := q5Idx.AsUint8x16().Add(archsimd.BroadcastUint8x16(2)).AsInt8x16()
	var sumf float32
	for ib := range y {
		b := w[ib*22 : ib*22+22]
		q := y[ib].qs[:]
		qh := archsimd.BroadcastUint32x4(binary.LittleEndian.Uint32(b[2:])).AsUint8x16()
		hbLo := qh.PermuteOrZero(q5Idx).And(bit).Equal(bit).ToInt8x16().AsUint8x16()
		hbHi := qh.PermuteOrZero(idxHi).And(bit).Equal(bit).ToInt8x16().AsUint8x16()
		v := u8x16(b[6:22])
		lo := v.And(m4).Or(mf0.AndNot(hbLo)).AsInt8x16().ExtendToInt16()
		hi := v.AsUint16x8().ShiftAllRight(4).AsUint8x16().And(m4).Or(mf0.AndNot(hbHi)).AsInt8x16().ExtendToInt16()
		s := lo.DotProductPairs(i8x16(q[0:16])).Add(hi.DotProductPairs(i8x16(q[16:32])))
		sumi := hsum32(s)
		sumf += float32(float32(f16Table[binary.LittleEndian.Uint16(b)]*y[ib].d) * float32(sumi))
	}
	return sumf
}
