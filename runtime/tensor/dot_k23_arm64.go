//go:build arm64 && !purego

package tensor

//go:generate python3 gen_neon_k23.py

// q2kRowNEON is the whole Q2_K × Q8_K row dot product (nb blocks) in NEON
// assembly (dot_k23_arm64.s), identical to dotQ2KQ8KGeneric.
//
//go:noescape
func q2kRowNEON(w *byte, y *blockQ8K, nb int) float32

// q3kRowNEON is q2kRowNEON for Q3_K, identical to dotQ3KQ8KGeneric.
//
//go:noescape
func q3kRowNEON(w *byte, y *blockQ8K, nb int) float32

func dotQ2KQ8KNEON(w []byte, y []blockQ8K) float32 {
	if len(y) == 0 {
		return 0
	}
	w = w[:84*len(y)]
	return q2kRowNEON(&w[0], &y[0], len(y))
}

func dotQ3KQ8KNEON(w []byte, y []blockQ8K) float32 {
	if len(y) == 0 {
		return 0
	}
	w = w[:110*len(y)]
	return q3kRowNEON(&w[0], &y[0], len(y))
}
