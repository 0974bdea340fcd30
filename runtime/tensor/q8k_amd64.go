//go:build amd64 && !purego

package tensor

import "golang.org/x/sys/cpu"

// q8kBlockAVX2 quantizes one block of 256 values into b, as quantizeQ8KGo
// does with permuteQ8K set, and reports false (b untouched) when all of
// them are zero (q8k_amd64.s).
//
//go:noescape
func q8kBlockAVX2(x *float32, b *blockQ8K) bool

func init() {
	if cpu.X86.HasAVX2 {
		q8kBlock = func(x *[QK_K]float32, b *blockQ8K) bool { return q8kBlockAVX2(&x[0], b) }
	}
}
