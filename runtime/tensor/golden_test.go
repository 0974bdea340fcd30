package tensor

import (
	"bufio"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"strings"
	"testing"
)

// TestMatVecGolden pins the exact float32 bits MatVec returns for every
// weight type on deterministic inputs (built with integer arithmetic only,
// so they are identical on every architecture). The file was written on
// amd64; passing it on arm64 (qemu) proves the kernels give bit-identical
// results across architectures (no compiler FMA fusion, same lane order).
// Types whose best kernel reorders a float sum (kernel.exact false) are
// skipped.
//
// Regenerate with: go test ./runtime/tensor -run TestMatVecGolden -update
func TestMatVecGolden(t *testing.T) {
	const path = "testdata/matvec_golden.txt"
	got := goldenOutputs(t)
	if *update {
		var sb strings.Builder
		for _, line := range got {
			sb.WriteString(line + "\n")
		}
		if err := os.WriteFile(path, []byte(sb.String()), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatalf("%v (regenerate with -update)", err)
	}
	defer f.Close()
	want := map[string]string{}
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		typ, _, _ := strings.Cut(sc.Text(), " ")
		want[typ] = sc.Text()
	}
	for _, line := range got {
		typ, _, _ := strings.Cut(line, " ")
		if ty, err := ParseType(typ); err == nil && !kernels[ty].exact {
			continue // a SIMD kernel reorders this type's float sum
		}
		if w, ok := want[typ]; !ok {
			t.Errorf("%s: no golden line", typ)
		} else if w != line {
			t.Errorf("%s: MatVec bits differ from golden\n got %.200s\nwant %.200s", typ, line, w)
		}
	}
}

func goldenOutputs(t *testing.T) []string {
	r := rand.New(rand.NewPCG(42, 43))
	intVec := func(n int, scale float32) []float32 {
		x := make([]float32, n)
		for i := range x {
			x[i] = float32(int(r.Uint32()%2001)-1000) / 1000 * scale
		}
		return x
	}
	const rows, cols = 6, 512
	var out []string
	for _, tc := range matTypes {
		rb, _ := tc.t.RowSize(cols)
		data := make([]byte, rows*rb)
		// Q2_K and Q3_K keep the random-byte blocks they were pinned with
		// before they had quantizers, so the golden lines stay valid.
		if CanQuantize(tc.t) && tc.t != Q2_K && tc.t != Q3_K {
			w := intVec(rows*cols, 1)
			for row := 0; row < rows; row++ {
				if err := Quantize(tc.t, w[row*cols:(row+1)*cols], data[row*rb:(row+1)*rb]); err != nil {
					t.Fatal(err)
				}
			}
		} else {
			for i := range data {
				data[i] = uint8(r.Uint32())
			}
			for off := 0; off < len(data); off += tc.t.TypeSize() {
				switch tc.t {
				case Q2_K:
					data[off+80], data[off+81], data[off+82], data[off+83] = 0x1f, 0x20, 0x1f, 0x1c
				case Q3_K:
					data[off+108], data[off+109] = 0x1f, 0x20
				}
			}
		}
		m := Matrix{Type: tc.t, Rows: rows, Cols: cols, Data: data}
		var sb strings.Builder
		sb.WriteString(tc.t.String())
		for v := 0; v < 3; v++ {
			x := intVec(cols, float32(v+1))
			dst := make([]float32, rows)
			if err := MatVec(nil, dst, m, x); err != nil {
				t.Fatal(err)
			}
			for _, d := range dst {
				fmt.Fprintf(&sb, " %08x", math.Float32bits(d))
			}
		}
		out = append(out, sb.String())
	}
	return out
}
