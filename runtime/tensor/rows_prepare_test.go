package tensor

import (
	"math"
	"math/rand/v2"
	"sync"
	"testing"
)

// TestRowsPrepareConcurrent: after Prepare, goroutines sharing one Rows
// through MatMulMultiRows with a nil Pool get the products of a fresh Rows
// on one goroutine, bit for bit; Prepare refuses the types whose products
// gather float rows into the Rows.
func TestRowsPrepareConcurrent(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 31))
	const cols, n, rowsOut, workers = 512, 12, 16, 4
	x := randVec(r, n*cols, 2)
	for _, tc := range []struct {
		types []Type
		ok    bool
	}{
		{[]Type{Q4_K, Q6_K}, true},
		{[]Type{Q8_0, Q4_K}, true},
		{[]Type{Q4_K, F32}, false},
		{[]Type{Q4_1}, false},
	} {
		var shared Rows
		shared.Set(x, n, cols)
		if got := shared.Prepare(tc.types...); got != tc.ok {
			t.Fatalf("%v: Prepare = %v, want %v", tc.types, got, tc.ok)
		}
		if !tc.ok {
			continue
		}
		ms := make([]Matrix, len(tc.types))
		for i, ty := range tc.types {
			ms[i] = makeMatrix(t, r, ty, rowsOut, cols)
		}
		sels := make([][]int32, workers)
		for w := range sels {
			sels[w] = make([]int32, 1+w*2)
			for i := range sels[w] {
				sels[w][i] = int32(r.IntN(n))
			}
		}
		out := func(cnt int) [][]float32 {
			d := make([][]float32, len(ms))
			for i := range d {
				d[i] = make([]float32, cnt*rowsOut)
			}
			return d
		}
		got := make([][][]float32, workers)
		errs := make([]error, workers)
		var wg sync.WaitGroup
		for w := range workers {
			got[w] = out(len(sels[w]))
			wg.Go(func() { errs[w] = MatMulMultiRows(nil, got[w], ms, &shared, sels[w]) })
		}
		wg.Wait()
		for w := range workers {
			if errs[w] != nil {
				t.Fatal(errs[w])
			}
			var fresh Rows
			fresh.Set(x, n, cols)
			want := out(len(sels[w]))
			if err := MatMulMultiRows(nil, want, ms, &fresh, sels[w]); err != nil {
				t.Fatal(err)
			}
			for k := range want {
				for i := range want[k] {
					if math.Float32bits(got[w][k][i]) != math.Float32bits(want[k][i]) {
						t.Fatalf("%v worker %d matrix %d value %d: %v != %v", tc.types, w, k, i, got[w][k][i], want[k][i])
					}
				}
			}
		}
	}
}
