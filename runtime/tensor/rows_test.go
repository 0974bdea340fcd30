package tensor

import (
	"math"
	"math/rand/v2"
	"strings"
	"testing"
)

// TestMatMulMultiRowsMatchesGathered: products over selected rows of a
// Rows (activations quantized once for all rows) equal MatMulMulti on the
// gathered float rows, bit for bit, for every type and selections with
// repeats, any order, 1-17 rows, and two matrices of different types.
func TestMatMulMultiRowsMatchesGathered(t *testing.T) {
	r := rand.New(rand.NewPCG(31, 32))
	const cols, n, rowsOut = 512, 20, 9
	x := randVec(r, n*cols, 2)
	for _, tc := range matTypes {
		t.Run(tc.t.String(), func(t *testing.T) {
			if cols%tc.t.BlockSize() != 0 {
				t.Skip("block size")
			}
			ms := []Matrix{makeMatrix(t, r, tc.t, rowsOut, cols), makeMatrix(t, r, Q4_K, rowsOut+3, cols)}
			var rs Rows
			rs.Set(x, n, cols)
			for _, cnt := range []int{1, 2, 3, 4, 5, 8, 9, 17} {
				sel := make([]int32, cnt)
				for i := range sel {
					sel[i] = int32(r.IntN(n))
				}
				gx := make([]float32, cnt*cols)
				for j, i := range sel {
					copy(gx[j*cols:], x[int(i)*cols:(int(i)+1)*cols])
				}
				for _, threads := range []int{1, 2} {
					p := NewPool(threads)
					want := [][]float32{make([]float32, cnt*ms[0].Rows), make([]float32, cnt*ms[1].Rows)}
					got := [][]float32{make([]float32, cnt*ms[0].Rows), make([]float32, cnt*ms[1].Rows)}
					if err := MatMulMulti(p, want, ms, gx, cnt); err != nil {
						t.Fatal(err)
					}
					if err := MatMulMultiRows(p, got, ms, &rs, sel); err != nil {
						t.Fatal(err)
					}
					p.Close()
					for k := range got {
						for i := range got[k] {
							if math.Float32bits(got[k][i]) != math.Float32bits(want[k][i]) {
								t.Fatalf("cnt %d threads %d matrix %d value %d: %v != gathered %v", cnt, threads, k, i, got[k][i], want[k][i])
							}
						}
					}
				}
			}
		})
	}
}

func TestMatMulMultiRowsBadInput(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 3))
	m := makeMatrix(t, r, Q4_K, 4, 256)
	var rs Rows
	rs.Set(randVec(r, 3*256, 1), 3, 256)
	dst := [][]float32{make([]float32, 4)}
	for _, tc := range []struct {
		sel  []int32
		ms   []Matrix
		want string
	}{
		{[]int32{3}, []Matrix{m}, "row 3 selected of 3"},
		{[]int32{-1}, []Matrix{m}, "row -1 selected"},
		{[]int32{0}, []Matrix{makeMatrix(t, r, Q4_K, 4, 512)}, "512-column matrix with rows of 256"},
	} {
		err := MatMulMultiRows(nil, dst, tc.ms, &rs, tc.sel)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("sel %v: error %v, want %q", tc.sel, err, tc.want)
		}
	}
}
