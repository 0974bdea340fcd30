package tensor

import "math"

// Float32 helpers the model computes with. Where ggml accumulates in double
// (ggml_float) these do too, so results track the reference engine.

// Dot returns the float32 dot product of a and b, summed in 8 lanes as a
// 256-bit SIMD loop would. It panics if the lengths differ (a programming
// error, like an out-of-range index).
func Dot(a, b []float32) float32 {
	if len(a) != len(b) {
		panic("tensor: Dot of vectors of different lengths")
	}
	return dotF32F32(a, b)
}

func dotF32F32(a, b []float32) float32 {
	n := len(a)
	b = b[:n]
	var s0, s1, s2, s3, s4, s5, s6, s7 float32
	i := 0
	for ; i+8 <= n; i += 8 {
		aa := a[i : i+8 : i+8]
		bb := b[i : i+8 : i+8]
		s0 += float32(aa[0] * bb[0])
		s1 += float32(aa[1] * bb[1])
		s2 += float32(aa[2] * bb[2])
		s3 += float32(aa[3] * bb[3])
		s4 += float32(aa[4] * bb[4])
		s5 += float32(aa[5] * bb[5])
		s6 += float32(aa[6] * bb[6])
		s7 += float32(aa[7] * bb[7])
	}
	r := reduce8(s0, s1, s2, s3, s4, s5, s6, s7)
	for ; i < n; i++ {
		r += float32(a[i] * b[i])
	}
	return r
}

// Axpy adds a*x to y element-wise (ggml_vec_mad_f32): y[i] += x[i]*a.
// len(y) must be at least len(x).
func Axpy(a float32, x, y []float32) {
	y = y[:len(x)]
	for i, v := range x {
		y[i] += float32(v * a)
	}
}

// Scale multiplies x by a in place (ggml_vec_scale_f32).
func Scale(x []float32, a float32) {
	for i := range x {
		x[i] *= a
	}
}

// RMSNorm sets dst = x / sqrt(mean(x²) + eps) * w, as ggml_rms_norm followed
// by the weight multiply: the sum of squares is accumulated in double, the
// mean rounded to float, scale = 1/sqrtf(mean+eps). w may be nil (no
// weight). dst may alias x.
func RMSNorm(dst, x, w []float32, eps float32) {
	var sum float64
	for _, v := range x {
		sum += float64(v * v)
	}
	mean := float32(sum / float64(len(x)))
	scale := 1 / float32(math.Sqrt(float64(mean+eps)))
	dst = dst[:len(x)]
	if w == nil {
		for i, v := range x {
			dst[i] = v * scale
		}
		return
	}
	w = w[:len(x)]
	for i, v := range x {
		dst[i] = float32(v*scale) * w[i]
	}
}

// Softmax replaces x by softmax(x) in place, as ggml's soft_max: subtract
// the max, expf each value, sum in double, then scale by float(1/sum).
// -Inf entries (masked) become 0.
func Softmax(x []float32) {
	if len(x) == 0 {
		return
	}
	mx := float32(math.Inf(-1))
	for _, v := range x {
		mx = max(mx, v)
	}
	var sum float64
	for i, v := range x {
		e := expf(v - mx)
		x[i] = e
		sum += float64(e)
	}
	Scale(x, float32(1/sum))
}

// SiLU sets dst[i] = x[i]/(1+expf(-x[i])) (ggml_silu_f32). dst may alias x.
func SiLU(dst, x []float32) {
	dst = dst[:len(x)]
	for i, v := range x {
		dst[i] = silu(v)
	}
}

func silu(v float32) float32 { return v / (1 + expf(-v)) }

// SwiGLU sets dst[i] = silu(gate[i]) * up[i] (ggml_vec_swiglu_f32). dst may
// alias gate or up.
func SwiGLU(dst, gate, up []float32) {
	dst = dst[:len(gate)]
	up = up[:len(gate)]
	for i, g := range gate {
		dst[i] = silu(g) * up[i]
	}
}
