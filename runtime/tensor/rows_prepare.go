package tensor

// Prepare quantizes r's rows for the products of matrices of each of types
// now, as the first MatMulMultiRows with such a matrix would, and reports
// whether MatMulMultiRows calls with a nil Pool may then share r from
// several goroutines for those types: they only read r once its
// activations exist. That holds for every type whose products read
// quantized activations; it does not for F32 and the Q8_1 types (Q4_1,
// Q5_1), whose products gather float rows into r, and Prepare returns
// false if any of types is one of those, or has no kernel. The results of
// later products do not change.
func (r *Rows) Prepare(types ...Type) bool {
	for _, t := range types {
		k, ok := kernels[t]
		if !ok || k.act == actF32 || k.act == actQ8_1 {
			return false
		}
		if !r.have[k.act] {
			r.have[k.act] = true
			quantizeActivations(k.act, &r.sc, r.x, r.n, r.cols)
		}
	}
	return true
}
