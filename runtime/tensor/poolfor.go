package tensor

// For runs fn over [0, n) split into chunks on the pool's threads, the
// caller being one of them, as a product's rows are (about four chunks per
// thread, taken from a shared counter; inline for a nil or closed pool). fn
// must be safe to run concurrently on disjoint ranges. For must not be
// called from inside fn or while another product runs on the pool.
func (p *Pool) For(n int, fn func(lo, hi int)) {
	p.parallel(n, fn)
}
