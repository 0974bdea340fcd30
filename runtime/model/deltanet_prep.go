package model

// dnPrep is the per-token work of a DeltaNet layer before the recurrence,
// over a batch of n tokens: the causal conv with its SiLU, the L2 norms of
// the q and k heads, the gates β and g, and the rollback records. The conv
// of a channel reads only that channel's raw inputs (the window of the
// previous tokens, then the batch's), so the batch splits by channel; the
// norms and gates of a token read only that token, so that part splits by
// token. Each value is computed with the same operations in the same order
// as a token-by-token pass (convStep), so the results are bit-identical
// whatever the split.
type dnPrep struct {
	s                *State
	li, n            int
	mix, U, BG, b, a []float32
	channelsFn       func(lo, hi int) // channels, bound once (a method value allocates)
	tokensFn         func(lo, hi int) // tokens, bound once
}

// run prepares U (conv outputs, L2-normed q and k) and BG (β then g) of
// the batch, advancing the layer's conv window and writing the rollback
// records, split on the pool when the batch is large enough. The conv
// counts one unit of work per value (its SiLU is a vector exp): a decode
// step's 8192 channels at the 35B-A3B shape (tens of microseconds) stay
// inline. Split, they were faster alone, but a loaded host can keep the
// worker off its core for a scheduler slice at each dispatch: the
// 2-thread decode ran 1.46-1.60x slower in three of four alternated runs
// at load 9 (docs/kernels.md).
func (j *dnPrep) run() {
	if j.channelsFn == nil {
		j.channelsFn, j.tokensFn = j.channels, j.tokens
	}
	m := j.s.m
	hc := m.q35().HybridConfig
	C := hc.convDim()
	if m.threads < 2 || j.n*C < m.parMin {
		j.channels(0, C)
	} else {
		m.pool.For(C, j.channelsFn)
	}
	if m.threads < 2 || j.n < 2 || j.n*(2*hc.KHeads*hc.HeadDim+expWork*hc.VHeads) < m.parMin {
		j.tokens(0, j.n)
	} else {
		m.pool.For(j.n, j.tokensFn)
	}
}

// channels runs the conv of channels [lo, hi) (convBatch).
func (j *dnPrep) channels(lo, hi int) {
	m := j.s.m
	hc := m.q35().HybridConfig
	rs := &j.s.hybrid().layers[j.li]
	convBatch(j.U, rs.conv, j.mix, m.q35().layers[j.li].Conv, rs.ckConv, hc.convDim(), hc.ConvKernel, j.n, j.s.hybrid().plan.ckptAt, lo, hi)
}

// convBatch is convStep for n tokens at once on channels [lo, hi) of C:
// mix holds the tokens' raw inputs (n × C), window the previous taps-1
// tokens' (oldest first) and w the channels × taps weights. It writes
// silu(conv) into out (n × C), copies the window as it is before token
// ckAt into ck (if 0 <= ckAt < n), and shifts the batch's last inputs into
// the window, with convStep's operations in convStep's order.
func convBatch(out, window, mix, w, ck []float32, C, taps, n, ckAt, lo, hi int) {
	prev := taps - 1
	// row returns the raw inputs (all C channels) at batch position p (p <
	// 0: the window's).
	row := func(p int) []float32 {
		if p < 0 {
			return window[(prev+p)*C : (prev+p+1)*C]
		}
		return mix[p*C : (p+1)*C]
	}
	var fixed [8][]float32
	past := fixed[:0]
	if prev > len(fixed) {
		past = make([][]float32, 0, prev)
	}
	for t := range n {
		past = past[:0]
		for i := range prev {
			past = append(past, row(t-prev+i))
		}
		if t == ckAt {
			for i, r := range past {
				copy(ck[i*C+lo:i*C+hi], r[lo:hi])
			}
		}
		u := out[t*C : (t+1)*C]
		raw := mix[t*C : (t+1)*C]
		if prev == 3 {
			convRows3(u[lo:hi], past[0][lo:hi], past[1][lo:hi], past[2][lo:hi], raw[lo:hi], w[lo*taps:hi*taps])
		} else {
			for c := lo; c < hi; c++ {
				wc := w[c*taps : (c+1)*taps]
				var sum float32
				for i, r := range past {
					sum += float32(r[c] * wc[i])
				}
				sum += float32(raw[c] * wc[prev])
				u[c] = sum
			}
		}
		siluVec(u[lo:hi])
	}
	// The new window is the inputs at n-prev..n-1; in ascending order each
	// row read from the old window lies at or after the one written.
	for i := range prev {
		copy(window[i*C+lo:i*C+hi], row(n - prev + i)[lo:hi])
	}
}

// convRows3 is convBatch's sum for the usual four taps: u[c] = the three
// previous inputs r0, r1, r2 and the current raw, each times its weight
// of w (4 per channel), added in tap order from zero.
func convRows3(u, r0, r1, r2, raw, w []float32) {
	n := len(u)
	r0, r1, r2, raw, w = r0[:n], r1[:n], r2[:n], raw[:n], w[:4*n]
	for c := range n {
		wc := w[4*c : 4*c+4 : 4*c+4]
		var sum float32
		sum += float32(r0[c] * wc[0])
		sum += float32(r1[c] * wc[1])
		sum += float32(r2[c] * wc[2])
		sum += float32(raw[c] * wc[3])
		u[c] = sum
	}
}

// tokens runs the L2 norms, gates and rollback records of tokens [lo, hi).
func (j *dnPrep) tokens(lo, hi int) {
	m := j.s.m
	hc := m.q35().HybridConfig
	hl := &m.q35().layers[j.li]
	rs := &j.s.hybrid().layers[j.li]
	hist := &j.s.hybrid().plan
	C, D, VH, KH := hc.convDim(), hc.HeadDim, hc.VHeads, hc.KHeads
	for t := lo; t < hi; t++ {
		slot := hist.slot(t)
		if slot >= 0 {
			copy(rs.recM[slot*C:(slot+1)*C], j.mix[t*C:(t+1)*C])
		}
		u := j.U[t*C : (t+1)*C]
		for hd := range 2 * KH { // q heads, then k heads
			l2Norm(u[hd*D:(hd+1)*D], m.Eps)
		}
		bg := j.BG[t*2*VH : (t+1)*2*VH]
		for hd := range VH {
			bg[hd] = sigmoid(j.b[t*VH+hd])
			bg[VH+hd] = softplus(j.a[t*VH+hd]+hl.DtBias[hd]) * hl.A[hd]
		}
		if slot >= 0 {
			copy(rs.recU[slot*C:(slot+1)*C], u)
			copy(rs.recBG[slot*2*VH:(slot+1)*2*VH], bg)
		}
	}
}
