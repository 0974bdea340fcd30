package tensor

import "math"

// f16Table maps every IEEE half-precision bit pattern to its float32 value,
// like ggml's CPU table; inner loops look values up instead of decoding bits.
var f16Table = func() *[1 << 16]float32 {
	var t [1 << 16]float32
	for i := range t {
		t[i] = f16ToF32Slow(uint16(i))
	}
	return &t
}()

// F16ToF32 converts an IEEE 754 half-precision value (raw bits) to float32.
// The conversion is exact.
func F16ToF32(h uint16) float32 { return f16Table[h] }

func f16ToF32Slow(h uint16) float32 {
	sign := uint32(h>>15) << 31
	exp := uint32(h>>10) & 0x1f
	mant := uint32(h) & 0x3ff
	switch {
	case exp == 0x1f: // Inf or NaN
		return math.Float32frombits(sign | 0x7f800000 | mant<<13)
	case exp == 0:
		if mant == 0 {
			return math.Float32frombits(sign)
		}
		// subnormal: value = mant * 2^-24
		f := float32(mant) * (1.0 / (1 << 24))
		if sign != 0 {
			f = -f
		}
		return f
	}
	return math.Float32frombits(sign | (exp+112)<<23 | mant<<13)
}

// F32ToF16 converts f to IEEE half precision with round-to-nearest-even,
// exactly as ggml's ggml_compute_fp32_to_fp16 (and F16C's _cvtss_sh) do:
// overflow gives ±Inf, NaN stays NaN (quiet), tiny values become subnormals.
func F32ToF16(f float32) uint16 {
	const scaleToInf = float32(0x1.0p+112)
	const scaleToZero = float32(0x1.0p-110)
	base := float32(float32(abs32(f)*scaleToInf) * scaleToZero)
	w := math.Float32bits(f)
	shl1w := w + w
	sign := w & 0x80000000
	bias := shl1w & 0xff000000
	if bias < 0x71000000 {
		bias = 0x71000000
	}
	base = math.Float32frombits((bias>>1)+0x07800000) + base
	bits := math.Float32bits(base)
	expBits := (bits >> 13) & 0x00007c00
	mantBits := bits & 0x00000fff
	nonsign := expBits + mantBits
	if shl1w > 0xff000000 {
		return uint16(sign>>16) | 0x7e00
	}
	return uint16(sign>>16) | uint16(nonsign)
}

// BF16ToF32 converts a bfloat16 value (raw bits) to float32. It is exact.
func BF16ToF32(h uint16) float32 { return math.Float32frombits(uint32(h) << 16) }

// F32ToBF16 converts f to bfloat16 with round-to-nearest-even, as ggml's
// ggml_compute_fp32_to_bf16 does (NaN is kept quiet).
func F32ToBF16(f float32) uint16 {
	u := math.Float32bits(f)
	if u&0x7fffffff > 0x7f800000 {
		return uint16(u>>16) | 64
	}
	return uint16((u + (0x7fff + ((u >> 16) & 1))) >> 16)
}

func abs32(f float32) float32 { return math.Float32frombits(math.Float32bits(f) &^ (1 << 31)) }

// roundHalfAway is C's roundf: nearest integer, halves away from zero.
// Adding ±0.5 in float64 is exact for every float32 (and a tie that rounds
// to even for |f| >= 2^52, where f is already an even integer), and
// math.Trunc is a single instruction where math.Round is not.
func roundHalfAway(f float32) float32 {
	return float32(math.Trunc(float64(f) + math.Copysign(0.5, float64(f))))
}

// nearestInt is ggml's nearest_int: round half to even via the 1.5*2^23
// magic constant (valid for |f| <= 4194303).
func nearestInt(f float32) int32 {
	val := f + 12582912.0
	i := int32(math.Float32bits(val))
	return (i & 0x007fffff) - 0x00400000
}

// expf is the float32 exponential (libm expf is correctly rounded in
// practice; rounding the double result matches it almost always).
func expf(x float32) float32 { return float32(math.Exp(float64(x))) }
