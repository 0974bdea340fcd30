package tensor

import (
	"fmt"
	"math"
)

// actKind is the vec_dot_type a weight type multiplies with.
type actKind uint8

const (
	actF32 actKind = iota
	actF16
	actBF16
	actQ8_0
	actQ8_1
	actQ8K
)

// kernel is a weight type's dot product with its activation format. Exactly
// one function field is set, matching act: f32 for F32, F16 and BF16 (for
// F16/BF16 the activation holds the float32 values of x rounded to that
// type, as ggml converts x to its vec_dot_type first).
type kernel struct {
	act   actKind
	impl  string // "generic", "go", "avx2", "avx2-asm", "neon"
	exact bool   // bit-identical to the generic kernel (tested)
	f32   func(w []byte, x []float32) float32
	q80   func(w []byte, y []blockQ8_0) float32
	q81   func(w []byte, y []blockQ8_1) float32
	q8k   func(w []byte, y []blockQ8K) float32
	// q8kN, if set, is the batched form of q8k: rows consecutive weight
	// rows at w dotted with nv activation vectors of len(y)/nv blocks
	// each, row r · vector v stored at dst[r+v*stride]. It must equal q8k
	// per vector, bit for bit (TestBatchedMatchesGeneric); nv is at most
	// batchVectors.
	q8kN func(w []byte, rows int, y []blockQ8K, nv int, dst []float32, stride int)
	// q80N is q8kN for Q8_0 activations; yd holds the nv·len(y)/nv block
	// scales contiguously (scratch.q80d).
	q80N func(w []byte, rows int, y []blockQ8_0, yd []float32, nv int, dst []float32, stride int)
	// single reports that q8kN/q80N also serve single vectors (decode):
	// they are faster than the per-row q8k/q80 there, and identical.
	single bool
	// f32N, if set, is the batched form of f32: rows weight rows (rb
	// bytes apart) dotted with nv vectors of len(x)/nv values, row r ·
	// vector v stored at dst[r+v*stride], bit-identical to f32 per vector.
	// It serves single vectors too (several rows per call).
	f32N func(w []byte, rb, rows int, x []float32, nv int, dst []float32, stride int)
}

// batchVectors is the number of activation vectors a batched kernel call
// covers: 8 Q8_K vectors of 1024 values are 27 KiB, which stays in L1 while
// the rows of a chunk stream past them.
const batchVectors = 8

// batchBlocks is the shared start of the assembly batched kernels' Go
// wrappers: the blocks per vector of a call over ny blocks for nv vectors,
// and whether the kernel has work to do. With no rows or no vectors there
// is none; with no blocks every product is zero, so dst's rows are cleared.
func batchBlocks(rows, nv, ny int, dst []float32, stride int) (nb int, work bool) {
	if rows == 0 || nv == 0 {
		return 0, false
	}
	nb = ny / nv
	if nb == 0 {
		for v := range nv {
			clear(dst[v*stride : v*stride+rows])
		}
		return 0, false
	}
	return nb, true
}

// genericKernels are the reference (ggml generic C) kernels.
var genericKernels = map[Type]*kernel{
	F32:  {act: actF32, f32: dotF32Generic},
	F16:  {act: actF16, f32: dotF16Generic},
	BF16: {act: actBF16, f32: dotBF16Generic},
	Q4_0: {act: actQ8_0, q80: dotQ4_0Q8_0Generic},
	Q4_1: {act: actQ8_1, q81: dotQ4_1Q8_1Generic},
	Q5_0: {act: actQ8_0, q80: dotQ5_0Q8_0Generic},
	Q5_1: {act: actQ8_1, q81: dotQ5_1Q8_1Generic},
	Q8_0: {act: actQ8_0, q80: dotQ8_0Q8_0Generic},
	Q2_K: {act: actQ8K, q8k: dotQ2KQ8KGeneric},
	Q3_K: {act: actQ8K, q8k: dotQ3KQ8KGeneric},
	Q4_K: {act: actQ8K, q8k: dotQ4KQ8KGeneric},
	Q5_K: {act: actQ8K, q8k: dotQ5KQ8KGeneric},
	Q6_K: {act: actQ8K, q8k: dotQ6KQ8KGeneric},
}

// kernels are the ones MatVec uses: the fastest verified implementation per
// type (see dot_fast.go and the SIMD files), falling back to generic.
var kernels = func() map[Type]*kernel {
	m := make(map[Type]*kernel, len(genericKernels))
	for t, k := range genericKernels {
		k.impl, k.exact = "generic", true
		m[t] = k
	}
	for t, k := range fastKernels() {
		k.impl, k.exact = "go", true
		m[t] = k
	}
	goKernels = make(map[Type]*kernel, len(m))
	for t, k := range m {
		goKernels[t] = k
	}
	// SIMD (archsimd or NEON) first, then assembly, which wins where both
	// exist because it is exact and available without GOEXPERIMENT.
	for t, k := range simdKernels() {
		m[t] = k
	}
	for t, k := range asmKernels() {
		m[t] = k
	}
	return m
}()

// goKernels is the best pure-Go kernel set (no SIMD), kept for comparison
// and as the reference the faster kernels are tested against.
var goKernels map[Type]*kernel

// CanMatVec reports whether MatVec and MatMul support weights of type t.
func CanMatVec(t Type) bool { _, ok := kernels[t]; return ok }

// Matrix is a row-major ggml matrix: Rows rows of Cols elements of Type;
// each row is Type.RowSize(Cols) bytes. Data may be longer than needed.
// Swizzled says Data is in the swizzled layout (Swizzle), not GGUF's.
type Matrix struct {
	Type       Type
	Rows, Cols int
	Data       []byte
	Swizzled   bool
}

// rowBytes validates m and returns the byte size of one row.
func (m Matrix) rowBytes() (int, error) {
	if m.Rows < 0 || m.Cols < 0 {
		return 0, fmt.Errorf("tensor: matrix has negative shape %d×%d", m.Rows, m.Cols)
	}
	rb, err := m.Type.RowSize(m.Cols)
	if err != nil {
		return 0, err
	}
	if m.Rows > 0 && rb > 0 && m.Rows > len(m.Data)/rb {
		return 0, fmt.Errorf("tensor: %s matrix %d×%d needs %d bytes, has %d", m.Type, m.Rows, m.Cols, m.Rows*rb, len(m.Data))
	}
	return rb, nil
}

// Row dequantizes row r of m into dst (len(dst) must be m.Cols): the
// embedding lookup / get_rows operation.
func (m Matrix) Row(r int, dst []float32) error {
	rb, err := m.rowBytes()
	if err != nil {
		return err
	}
	if r < 0 || r >= m.Rows {
		return fmt.Errorf("tensor: row %d out of range [0,%d)", r, m.Rows)
	}
	if len(dst) != m.Cols {
		return fmt.Errorf("tensor: row of %d elements into a buffer of %d", m.Cols, len(dst))
	}
	row := m.Data[r*rb : (r+1)*rb]
	if m.Swizzled {
		if !Swizzles(m.Type) || m.Type != Q4_K {
			return fmt.Errorf("tensor: %s has no swizzled layout here", m.Type)
		}
		// one super-block at a time, so lookups allocate nothing
		var blk [144]byte
		for i := 0; i+144 <= len(row); i += 144 {
			unswizzleQ4K(blk[:], row[i:i+144])
			dequantQ4K(blk[:], dst[i/144*QK_K:(i/144+1)*QK_K])
		}
		return nil
	}
	return Dequantize(m.Type, row, dst)
}

// MatVec sets dst[r] = row r · x for every row, quantizing x once to the
// type's vec_dot_type, as ggml's CPU backend does. len(x) must be m.Cols and
// len(dst) m.Rows. p may be nil (single-threaded).
func MatVec(p *Pool, dst []float32, m Matrix, x []float32) error {
	return MatMul(p, dst, m, x, 1)
}

// MatMul does MatVec for n vectors: x is n×Cols (row-major) and dst is
// n×Rows (dst[v*Rows+r] = row r · x[v]). Each x row is quantized once, and
// each weight row is read once for all n vectors (batched prefill).
func MatMul(p *Pool, dst []float32, m Matrix, x []float32, n int) error {
	return matMulWith(kernels, p, dst, m, x, n)
}

// MatMulMulti is MatMul for up to 16 matrices that share the input x (the
// gate and up projections of all selected experts of a decoded token, or
// attention q/k/v): dsts[i] = ms[i]·x.
// The input is quantized once per distinct vec_dot_type and all rows run in
// one parallel pass, saving the repeated activation quantization and
// dispatch. All ms must have the same Cols.
func MatMulMulti(p *Pool, dsts [][]float32, ms []Matrix, x []float32, n int) error {
	return matMulMulti(kernels, p, dsts, ms, x, n)
}

// matMulWith is MatMul with an explicit kernel set (benchmarks and tests
// compare the generic, pure-Go fast and SIMD sets through it).
func matMulWith(ks map[Type]*kernel, p *Pool, dst []float32, m Matrix, x []float32, n int) error {
	return matMulMulti(ks, p, [][]float32{dst}, []Matrix{m}, x, n)
}

func matMulMulti(ks map[Type]*kernel, p *Pool, dsts [][]float32, ms []Matrix, x []float32, n int) error {
	return matMulMultiSrc(ks, p, dsts, ms, x, n, nil, nil)
}

// matMulMultiSrc is matMulMulti; with src set, the n input vectors are the
// rows sel of src (x is nil, or their float values when a kernel needs
// them) and their activations are gathered from src's, quantized once.
func matMulMultiSrc(ks map[Type]*kernel, p *Pool, dsts [][]float32, ms []Matrix, x []float32, n int, src *Rows, sel []int32) error {
	if len(ms) == 0 || len(ms) > maxParts || len(dsts) != len(ms) {
		return fmt.Errorf("tensor: matmul of %d matrices into %d outputs (1 to %d)", len(ms), len(dsts), maxParts)
	}
	var parts [maxParts]part // validated first, copied into the job below
	total := 0
	cols := ms[0].Cols
	for i, m := range ms {
		k, ok := ks[m.Type]
		if m.Swizzled {
			k, ok = swizzledKernels[m.Type]
		}
		if !ok {
			return fmt.Errorf("tensor: no matrix-vector kernel for type %s (swizzled %t)", m.Type, m.Swizzled)
		}
		rb, err := m.rowBytes()
		if err != nil {
			return err
		}
		if m.Cols != cols {
			return fmt.Errorf("tensor: matmul of matrices with %d and %d columns", cols, m.Cols)
		}
		if n < 0 || (m.Cols > 0 && n > math.MaxInt/max(m.Cols, m.Rows)) || (src == nil && len(x) != n*m.Cols) {
			return fmt.Errorf("tensor: matmul input has %d values, want %d vectors × %d", len(x), n, m.Cols)
		}
		if len(dsts[i]) != n*m.Rows {
			return fmt.Errorf("tensor: matmul output has %d values, want %d vectors × %d rows", len(dsts[i]), n, m.Rows)
		}
		parts[i] = part{m: m, rb: rb, k: k, dst: dsts[i], start: total}
		total += m.Rows
	}
	if n == 0 || total == 0 {
		return nil
	}
	var j *job
	var sc *scratch
	var st *inlineState
	if p == nil {
		st = inline.Get().(*inlineState)
		j, sc = &st.j, &st.sc
	} else {
		j, sc = &p.j, &p.sc
	}
	var done [actQ8K + 1]bool
	for i := range ms {
		if act := parts[i].k.act; !done[act] {
			done[act] = true
			if src != nil {
				src.gather(act, sc, sel)
			} else {
				quantizeActivations(act, sc, x, n, cols)
			}
		}
	}
	copy(j.parts[:len(ms)], parts[:len(ms)])
	j.np, j.n, j.x, j.sc, j.count = len(ms), n, x, sc, total
	if p == nil {
		var none *Pool
		none.dispatch(j)
	} else {
		p.dispatch(j)
	}
	for i := range j.np {
		j.parts[i] = part{}
	}
	j.x, j.sc = nil, nil
	if st != nil {
		inline.Put(st)
	}
	return nil
}

// roundF16 sets dst[i] = F16ToF32(F32ToF16(src[i])) (x rounded to F16, as
// ggml converts the activation of an F16 product); amd64 replaces it with
// an F16C form.
var roundF16 = func(dst, src []float32) {
	for i, v := range src {
		dst[i] = f16Table[F32ToF16(v)]
	}
}

// quantizeActivations converts the n×cols activations x to the vec_dot_type
// act into sc.
func quantizeActivations(act actKind, sc *scratch, x []float32, n, cols int) { //nolint:unparam // n is the batch, constant only in the single-vector callers
	switch act {
	case actF16:
		sc.f16 = grow(sc.f16, len(x))
		roundF16(sc.f16, x)
	case actBF16:
		sc.bf16 = grow(sc.bf16, len(x))
		for i, v := range x {
			sc.bf16[i] = BF16ToF32(F32ToBF16(v))
		}
	case actQ8_0:
		sc.q80 = grow(sc.q80, len(x)/32)
		quantizeQ8_0(x, sc.q80)
		sc.q80d = grow(sc.q80d, len(sc.q80))
		for i := range sc.q80 {
			sc.q80d[i] = sc.q80[i].d
		}
	case actQ8_1:
		sc.q81 = grow(sc.q81, len(x)/32)
		quantizeQ8_1(x, sc.q81)
	case actQ8K:
		sc.q8k = growQ8K(sc.q8k, len(x)/QK_K)
		quantizeQ8K(x, sc.q8k)
	}
}

// batched reports whether products over n vectors use the batched form.
func (k *kernel) batched(n int) bool {
	return k.f32N != nil || ((k.q8kN != nil || k.q80N != nil) && (n > 1 || k.single))
}

// rows computes job rows [lo,hi) (across parts) for all vectors.
func (j *job) rows(lo, hi int) {
	for i := 0; i < j.np; i++ {
		pt := &j.parts[i]
		a, b := max(lo, pt.start), min(hi, pt.start+pt.m.Rows)
		if a < b {
			if pt.k.batched(j.n) {
				j.partRowsBatched(pt, a-pt.start, b-pt.start)
			} else {
				j.partRows(pt, a-pt.start, b-pt.start)
			}
		}
	}
}

// partRows computes rows [lo,hi) of one part for all vectors.
func (j *job) partRows(pt *part, lo, hi int) {
	m, rb, n, k := pt.m, pt.rb, j.n, pt.k
	cols := m.Cols
	dst := pt.dst
	for r := lo; r < hi; r++ {
		w := m.Data[r*rb : (r+1)*rb]
		switch k.act {
		case actF32:
			for v := 0; v < n; v++ {
				dst[v*m.Rows+r] = k.f32(w, j.x[v*cols:(v+1)*cols])
			}
		case actF16:
			for v := 0; v < n; v++ {
				dst[v*m.Rows+r] = k.f32(w, j.sc.f16[v*cols:(v+1)*cols])
			}
		case actBF16:
			for v := 0; v < n; v++ {
				dst[v*m.Rows+r] = k.f32(w, j.sc.bf16[v*cols:(v+1)*cols])
			}
		case actQ8_0:
			nb := cols / 32
			for v := 0; v < n; v++ {
				dst[v*m.Rows+r] = k.q80(w, j.sc.q80[v*nb:(v+1)*nb])
			}
		case actQ8_1:
			nb := cols / 32
			for v := 0; v < n; v++ {
				dst[v*m.Rows+r] = k.q81(w, j.sc.q81[v*nb:(v+1)*nb])
			}
		case actQ8K:
			nb := cols / QK_K
			for v := 0; v < n; v++ {
				dst[v*m.Rows+r] = k.q8k(w, j.sc.q8k[v*nb:(v+1)*nb])
			}
		}
	}
}

// partRowsBatched is partRows for a kernel with a batched form: the
// vectors are taken batchVectors at a time (their activations stay in L1)
// and each weight row of [lo,hi) is decoded once per group.
func (j *job) partRowsBatched(pt *part, lo, hi int) {
	m, rb, n, k := pt.m, pt.rb, j.n, pt.k
	if k.f32N != nil {
		x := j.x
		if k.act == actF16 {
			x = j.sc.f16
		}
		cols := m.Cols
		for v0 := 0; v0 < n; v0 += batchVectors {
			nv := min(batchVectors, n-v0)
			xv := x[v0*cols : (v0+nv)*cols]
			dst := pt.dst[v0*m.Rows:]
			k.f32N(m.Data[lo*rb:hi*rb], rb, hi-lo, xv, nv, dst[lo:], m.Rows)
		}
		return
	}
	if k.q80N != nil {
		nb := m.Cols / 32
		for v0 := 0; v0 < n; v0 += batchVectors {
			nv := min(batchVectors, n-v0)
			dst := pt.dst[v0*m.Rows:]
			k.q80N(m.Data[lo*rb:hi*rb], hi-lo, j.sc.q80[v0*nb:(v0+nv)*nb], j.sc.q80d[v0*nb:(v0+nv)*nb], nv, dst[lo:], m.Rows)
		}
		return
	}
	nb := m.Cols / QK_K
	// Groups of equal size rather than 8s and a small tail: a prefill
	// expert routed 9 positions runs 5+4, not 8 and a 1-vector pass.
	groups := (n + batchVectors - 1) / batchVectors
	for v0, g := 0, 0; v0 < n; g++ {
		nv := (n - v0 + groups - g - 1) / (groups - g)
		y := j.sc.q8k[v0*nb : (v0+nv)*nb]
		dst := pt.dst[v0*m.Rows:]
		k.q8kN(m.Data[lo*rb:hi*rb], hi-lo, y, nv, dst[lo:], m.Rows)
		v0 += nv
	}
}
