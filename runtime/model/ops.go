package model

import (
	"math"

	"github.com/lesfarm/lesfarm/runtime/tensor"
)

// The float32 vector operations below follow ggml's CPU reference
// semantics (accumulation in float64 where ggml uses ggml_float, float32
// rounding of every product) so F32 models agree with llama.cpp closely.
// The explicit float32(...) conversions stop the compiler from fusing
// multiply-adds on architectures with FMA, which ggml's scalar code does not.

// rmsNorm writes x / sqrt(mean(x²)+eps) * w into dst (dst may alias x).
func rmsNorm(dst, x, w []float32, eps float32) {
	var sum float64
	for _, v := range x {
		sum += float64(float32(v * v))
	}
	mean := float32(sum / float64(len(x)))
	scale := float32(1) / float32(math.Sqrt(float64(mean+eps)))
	for i, v := range x {
		dst[i] = float32(v*scale) * w[i]
	}
}

// softmax normalises x in place: exp(x-max) / sum. The exp is
// tensor.ExpShift's (within 1 ulp of the correctly rounded one, the same
// bits in every build, vectorised where the build has a kernel); the sum
// is float64 in index order.
func softmax(x []float32) {
	mx := float32(math.Inf(-1))
	for _, v := range x {
		if v > mx {
			mx = v
		}
	}
	tensor.ExpShift(x, mx)
	var sum float64
	for _, e := range x {
		sum += float64(e)
	}
	inv := float32(1.0 / sum)
	for i := range x {
		x[i] *= inv
	}
}

// ones is a block of 1s for siluVec, read-only.
var ones = func() (o [256]float32) {
	for i := range o {
		o[i] = 1
	}
	return o
}()

// siluVec sets x[i] = x[i] / (1 + exp(-x[i])) with tensor.SiLUMul's
// vector exp (times 1, which is exact), in blocks of len(ones): the same
// bits in every build, a few nanoseconds a value where math.Exp costs
// ~10 ns (the DeltaNet conv and output gate).
func siluVec(x []float32) {
	for len(x) > 0 {
		k := min(len(x), len(ones))
		tensor.SiLUMul(x[:k], ones[:k])
		x = x[k:]
	}
}

// sigmoidMulVec sets o[i] *= 1 / (1 + exp(-g[i])) for i < len(o), with
// tensor.ExpShift's vector exp, using e (len(o) floats) as scratch (the
// gated attention's output gate).
func sigmoidMulVec(o, g, e []float32) {
	e = e[:len(o)]
	for i := range e {
		e[i] = -g[i]
	}
	tensor.ExpShift(e, 0)
	for i := range o {
		o[i] *= 1 / (1 + e[i])
	}
}

// topK writes the indices of the k largest values of p into idx in
// descending order of value; ties go to the lower index.
func topK(p []float32, idx []int) {
	k := len(idx)
	n := 0
	for i, v := range p {
		// Insertion into the sorted prefix idx[:n].
		if n == k && v <= p[idx[k-1]] {
			continue
		}
		j := n
		if n < k {
			n++
		} else {
			j = k - 1
		}
		for j > 0 && v > p[idx[j-1]] {
			idx[j] = idx[j-1]
			j--
		}
		idx[j] = i
	}
}

// ropeTable computes NEOX rotary angles the way ggml does: theta starts at
// the position and is multiplied by theta_scale = base^(-2/n_dims) once per
// dimension pair, in float32.
type ropeTable struct {
	dims  int // rotated dimensions (even)
	scale float32
}

func newRope(base float32, dims int) *ropeTable {
	return &ropeTable{dims: dims, scale: float32(math.Pow(float64(base), -2.0/float64(dims)))}
}

// fill writes cos and sin of the dims/2 angles of position pos.
func (r *ropeTable) fill(pos int, cos, sin []float32) {
	theta := float32(pos)
	for i := 0; i < r.dims/2; i++ {
		cos[i] = float32(math.Cos(float64(theta)))
		sin[i] = float32(math.Sin(float64(theta)))
		theta *= r.scale
	}
}

// apply rotates the first dims elements of x (one head) in NEOX style:
// element i pairs with element i+dims/2.
func (r *ropeTable) apply(x, cos, sin []float32) {
	h := r.dims / 2
	for i := 0; i < h; i++ {
		x0, x1 := x[i], x[i+h]
		x[i] = float32(x0*cos[i]) - float32(x1*sin[i])
		x[i+h] = float32(x0*sin[i]) + float32(x1*cos[i])
	}
}
