package tensor

import "fmt"

// DecayAddDot is the fused state pass of a gated delta rule (qwen35moe's
// DeltaNet), one head and one token. st holds rows of D = len(x) floats
// (row j is value dim j over the D key dims, len(st) = len(o)·D). For
// each row j it sets
//
//	row_j = float32(d·row_j) + float32(a[j]·x)   (element by element)
//
// and then o[j] = row_j · q and, when kn is not nil, kn[j] = row_j · k2,
// both on the updated row. Every dot has the bits MatVec of an F32 matrix
// returns (8 lanes, reduce8, the tail in order), so one pass over the
// state replaces an update pass and one or two F32 products with the
// same results. It returns an error, and touches nothing, when the
// lengths do not match.
func DecayAddDot(st []float32, d float32, a, x, q, o, k2, kn []float32) error {
	D, rows := len(x), len(o)
	if len(st) != rows*D || len(a) < rows || len(q) != D || (kn != nil && (len(kn) < rows || len(k2) != D)) {
		return fmt.Errorf("tensor: DecayAddDot: state %d, rows %d of %d, a %d, q %d, k2 %d, kn %d do not match",
			len(st), rows, D, len(a), len(q), len(k2), len(kn))
	}
	if rows == 0 || D == 0 {
		return nil
	}
	if D%8 == 0 && decayAddDotAsm(st, d, a, x, q, o, k2, kn) {
		return nil
	}
	decayAddDotGo(st, d, a, x, q, o, k2, kn)
	return nil
}

// decayAddDotGo is DecayAddDot in Go (purego, arm64, row lengths that are
// not a multiple of 8): dotF32Generic's lanes on the updated row.
func decayAddDotGo(st []float32, d float32, a, x, q, o, k2, kn []float32) {
	D := len(x)
	for j := range o {
		row := st[j*D : (j+1)*D : (j+1)*D]
		aj := a[j]
		var s, t [8]float32
		i := 0
		for ; i+8 <= D; i += 8 {
			for l := range 8 {
				r := float32(d*row[i+l]) + float32(aj*x[i+l])
				row[i+l] = r
				s[l] += float32(r * q[i+l])
			}
		}
		so := reduce8(s[0], s[1], s[2], s[3], s[4], s[5], s[6], s[7])
		for ; i < D; i++ {
			r := float32(d*row[i]) + float32(aj*x[i])
			row[i] = r
			so += float32(r * q[i])
		}
		o[j] = so
		if kn == nil {
			continue
		}
		i = 0
		for ; i+8 <= D; i += 8 {
			for l := range 8 {
				t[l] += float32(row[i+l] * k2[i+l])
			}
		}
		sk := reduce8(t[0], t[1], t[2], t[3], t[4], t[5], t[6], t[7])
		for ; i < D; i++ {
			sk += float32(row[i] * k2[i])
		}
		kn[j] = sk
	}
}
