package tensor

import (
	"bytes"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
)

// TestSwizzledMatchesGeneric checks that every product of a swizzled Q4_K
// matrix (1 to 17 vectors, odd and even row counts, 1 and 2 threads, side
// arrays on the stack and from the pool) is bit-identical to the generic
// kernel on the file's bytes, as is its per-row form, and that its rows
// dequantize the same.
func TestSwizzledMatchesGeneric(t *testing.T) {
	if !Swizzles(Q4_K) {
		t.Skip("no swizzled layout on this machine (it is amd64 AVX2's)")
	}
	r := rand.New(rand.NewPCG(41, 42))
	for _, rows := range []int{1, 2, 13} {
		for _, cols := range []int{QK_K, 3 * QK_K, 17 * QK_K} {
			for _, m := range []Matrix{makeMatrix(t, r, Q4_K, rows, cols), randomBytesMatrix(r, Q4_K, rows, cols)} {
				sw := m
				sw.Data = slices.Clone(m.Data)
				if ok, err := Swizzle(Q4_K, sw.Data); !ok || err != nil {
					t.Fatalf("Swizzle = %t, %v", ok, err)
				}
				sw.Swizzled = true
				if bytes.Equal(sw.Data, m.Data) {
					t.Fatal("Swizzle left the quants in place")
				}
				for _, n := range []int{1, 2, 3, 4, 5, 6, 7, 8, 9, 17} {
					x := randVec(r, n*cols, float32(n))
					for _, threads := range []int{1, 2} {
						p := NewPool(threads)
						got := make([]float32, n*rows)
						err := MatMul(p, got, sw, x, n)
						p.Close()
						if err != nil {
							t.Fatal(err)
						}
						for v := range n {
							want := genericMatVec(t, m, x[v*cols:(v+1)*cols])
							for i := range rows {
								if g := got[v*rows+i]; math.Float32bits(g) != math.Float32bits(want[i]) {
									t.Fatalf("%d×%d n=%d threads=%d vector %d row %d: %v != generic %v", rows, cols, n, threads, v, i, g, want[i])
								}
							}
						}
					}
				}
				// the per-row form (kernel.q8k), which the batched form
				// always pre-empts in MatMul
				x := randVec(r, cols, 1)
				y := make([]blockQ8K, cols/QK_K)
				quantizeQ8K(x, y)
				want := genericMatVec(t, m, x)
				for i := range rows {
					g := swizzledKernels[Q4_K].q8k(sw.Data[i*144*(cols/QK_K):(i+1)*144*(cols/QK_K)], y)
					if math.Float32bits(g) != math.Float32bits(want[i]) {
						t.Fatalf("%d×%d row %d: per-row swizzled %v != generic %v", rows, cols, i, g, want[i])
					}
				}
				a, b := make([]float32, cols), make([]float32, cols)
				for i := range rows {
					if err := m.Row(i, a); err != nil {
						t.Fatal(err)
					}
					if err := sw.Row(i, b); err != nil {
						t.Fatal(err)
					}
					if !slices.Equal(a, b) {
						t.Fatalf("row %d of the swizzled matrix dequantizes differently", i)
					}
				}
			}
		}
	}
}

// TestSwizzleLayout checks the permutation's round trip and Swizzle's
// answers for types without a swizzled layout and for partial
// super-blocks.
func TestSwizzleLayout(t *testing.T) {
	seen := map[byte]bool{}
	for _, j := range q4kSwizzle {
		seen[j] = true
	}
	if len(seen) != 32 {
		t.Fatalf("q4kSwizzle is not a permutation: %v", q4kSwizzle)
	}
	r := rand.New(rand.NewPCG(43, 44))
	data := make([]byte, 5*144)
	for i := range data {
		data[i] = byte(r.Uint32())
	}
	tests := []struct {
		name   string
		typ    Type
		data   []byte
		ok     bool
		errMsg string
	}{
		{"q4k", Q4_K, slices.Clone(data), Swizzles(Q4_K), ""},
		{"q6k untouched", Q6_K, slices.Clone(data[:210]), false, ""},
		{"q4k partial block", Q4_K, slices.Clone(data[:200]), false, "not a whole number"},
	}
	if swizzleFast != nil {
		// the assembly and the Go loop give the same bytes
		a, b := slices.Clone(data), slices.Clone(data)
		if _, err := Swizzle(Q4_K, a); err != nil {
			t.Fatal(err)
		}
		fast := swizzleFast
		swizzleFast = nil
		_, err := Swizzle(Q4_K, b)
		swizzleFast = fast
		if err != nil || !bytes.Equal(a, b) {
			t.Fatalf("assembly and Go swizzles differ (err %v)", err)
		}
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			orig := slices.Clone(tc.data)
			ok, err := Swizzle(tc.typ, tc.data)
			if tc.errMsg != "" && Swizzles(tc.typ) {
				if err == nil || !bytes.Contains([]byte(err.Error()), []byte(tc.errMsg)) {
					t.Fatalf("err = %v, want %q", err, tc.errMsg)
				}
				return
			}
			if err != nil || ok != tc.ok {
				t.Fatalf("Swizzle = %t, %v; want %t", ok, err, tc.ok)
			}
			if !ok {
				if !bytes.Equal(tc.data, orig) {
					t.Fatal("Swizzle changed data it did not swizzle")
				}
				return
			}
			back := make([]byte, len(tc.data))
			unswizzleQ4K(back, tc.data)
			if !bytes.Equal(back, orig) {
				t.Fatal("unswizzle(swizzle(x)) != x")
			}
		})
	}
}

// TestSwizzledBadInput checks that a matrix marked swizzled whose type has
// no swizzled layout here is refused with an error naming it, by products
// and by row lookups, instead of being read in the wrong layout.
func TestSwizzledBadInput(t *testing.T) {
	r := rand.New(rand.NewPCG(45, 46))
	for _, typ := range []Type{Q6_K, Q8_0, F32} {
		m := makeMatrix(t, r, typ, 4, QK_K)
		m.Swizzled = true
		err := MatVec(nil, make([]float32, 4), m, randVec(r, QK_K, 1))
		if err == nil || !strings.Contains(err.Error(), typ.String()) {
			t.Errorf("%s: MatVec err = %v, want an error naming the type", typ, err)
		}
		if err := m.Row(0, make([]float32, QK_K)); err == nil {
			t.Errorf("%s: Row of a swizzled matrix without a swizzled layout succeeded", typ)
		}
	}
}
