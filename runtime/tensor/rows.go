package tensor

import "fmt"

// Rows is a batch of n activation rows of cols values that several
// products take subsets of: the experts of a prefill layer each multiply
// the positions routed to them. Each vec_dot_type the products need is
// computed once for all n rows (on first use), and MatMulMultiRows copies
// the selected rows' quantized blocks instead of gathering floats and
// quantizing them again for every expert. Quantization works block by
// block within a row, so the results are bit-identical to MatMulMulti on
// the gathered rows. A Rows is not safe for concurrent use.
type Rows struct {
	x       []float32
	n, cols int
	have    [actQ8K + 1]bool
	sc      scratch   // activations of all n rows
	gx      []float32 // gathered float rows (F32 kernels)
}

// Set makes r the n×cols rows x (kept, not copied: x must not change while
// r is in use) and forgets the previous rows' activations.
func (r *Rows) Set(x []float32, n, cols int) {
	r.x, r.n, r.cols = x[:n*cols], n, cols
	r.have = [actQ8K + 1]bool{}
}

// MatMulMultiRows is MatMulMulti on the rows sel of r as its len(sel)
// input vectors: dsts[i] = ms[i]·r[sel] (dsts[i] is len(sel)×Rows).
func MatMulMultiRows(p *Pool, dsts [][]float32, ms []Matrix, r *Rows, sel []int32) error {
	for _, m := range ms {
		if m.Cols != r.cols {
			return fmt.Errorf("tensor: matmul of %d-column matrix with rows of %d values", m.Cols, r.cols)
		}
	}
	for _, i := range sel {
		if i < 0 || int(i) >= r.n {
			return fmt.Errorf("tensor: row %d selected of %d", i, r.n)
		}
	}
	var x []float32
	for _, m := range ms {
		if k, ok := kernels[m.Type]; ok && (k.act == actF32 || k.act == actQ8_1) {
			r.gx = grow(r.gx, len(sel)*r.cols)
			r.gatherFloats(r.gx, sel)
			x = r.gx
			break
		}
	}
	return matMulMultiSrc(kernels, p, dsts, ms, x, len(sel), r, sel)
}

func (r *Rows) gatherFloats(dst []float32, sel []int32) {
	c := r.cols
	for j, i := range sel {
		copy(dst[j*c:(j+1)*c], r.x[int(i)*c:(int(i)+1)*c])
	}
}

// gather fills sc with the act activations of rows sel, quantizing all
// rows of r for act first if they are not yet.
func (r *Rows) gather(act actKind, sc *scratch, sel []int32) {
	if act == actF32 {
		return // the kernels read the gathered floats (x)
	}
	if !r.have[act] {
		r.have[act] = true
		quantizeActivations(act, &r.sc, r.x, r.n, r.cols)
	}
	c := r.cols
	switch act {
	case actF16:
		sc.f16 = gatherRows(sc.f16, r.sc.f16, sel, c)
	case actBF16:
		sc.bf16 = gatherRows(sc.bf16, r.sc.bf16, sel, c)
	case actQ8_0:
		sc.q80 = gatherRows(sc.q80, r.sc.q80, sel, c/32)
		sc.q80d = gatherRows(sc.q80d, r.sc.q80d, sel, c/32)
	case actQ8_1:
		sc.q81 = gatherRows(sc.q81, r.sc.q81, sel, c/32)
	case actQ8K:
		sc.q8k = growQ8K(sc.q8k, len(sel)*(c/QK_K)) // aligned; gatherRows keeps it
		sc.q8k = gatherRows(sc.q8k, r.sc.q8k, sel, c/QK_K)
	}
}

// gatherRows returns dst grown to len(sel) rows of w elements, row j being
// row sel[j] of src.
func gatherRows[T any](dst, src []T, sel []int32, w int) []T {
	dst = grow(dst, len(sel)*w)
	for j, i := range sel {
		copy(dst[j*w:(j+1)*w], src[int(i)*w:(int(i)+1)*w])
	}
	return dst
}
