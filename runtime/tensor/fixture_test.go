package tensor

import (
	"bytes"
	"encoding/binary"
	"flag"
	"fmt"
	fxdir "github.com/lesfarm/lesfarm/internal/fixture"
	"io"
	"math"
	"os"
	"path/filepath"
	"testing"
)

// The golden fixtures (../shared/testdata/golden) were quantized from one F32
// file by llama.cpp's llama-quantize without an importance matrix, which runs
// the quantize_row_*_ref functions. testdata/ggml_quant_ref.bin keeps the
// first rows of a few tensors in F32 and as llama.cpp quantized them, so the
// project's CI checks, without ../shared, that our quantizers reproduce
// llama.cpp's bytes exactly and that dequantization reads its layouts.
//
// Regenerate with: go test ./runtime/tensor -run TestGGMLFixture -update

var update = flag.Bool("update", false, "regenerate testdata from ../shared/testdata")

const fixturePath = "testdata/ggml_quant_ref.bin"

type fixtureEntry struct {
	tensor     string
	typ        Type
	rows, cols int
	f32        []float32
	quant      []byte
}

var fixtureWanted = []struct {
	file, tensor string
	typ          Type
	rows         int
}{
	{"tiny-qwen3moe-q8_0.gguf", "blk.0.attn_q.weight", Q8_0, 16},
	{"tiny-qwen3moe-q4_k_m.gguf", "blk.0.attn_q.weight", Q4_K, 16},
	{"tiny-qwen3moe-q4_k_m.gguf", "blk.2.attn_v.weight", Q6_K, 16},
	{"tiny-qwen3moe-q4_k_m.gguf", "blk.0.ffn_down_exps.weight", Q5_0, 16},
	{"tiny-qwen3moe-mixed.gguf", "blk.1.attn_v.weight", Q5_K, 16},
	{"tiny-qwen3moe-q4_k_m.gguf", "token_embd.weight", Q4_K, 16},
}

func sharedGolden(t *testing.T) string {
	return filepath.Join(fxdir.SharedDir(), "golden")
}

func TestGGMLFixture(t *testing.T) {
	if *update {
		regenerateFixture(t)
	}
	entries := loadFixture(t)
	for _, e := range entries {
		t.Run(fmt.Sprintf("%s/%s", e.typ, e.tensor), func(t *testing.T) {
			rb, _ := e.typ.RowSize(e.cols)
			// Our quantizer reproduces llama-quantize byte for byte.
			got := make([]byte, len(e.quant))
			for r := 0; r < e.rows; r++ {
				if err := Quantize(e.typ, e.f32[r*e.cols:(r+1)*e.cols], got[r*rb:(r+1)*rb]); err != nil {
					t.Fatal(err)
				}
			}
			if !bytes.Equal(got, e.quant) {
				for i := range got {
					if got[i] != e.quant[i] {
						t.Fatalf("quantized bytes differ from llama.cpp's at byte %d (row %d, block byte %d): got %#02x want %#02x",
							i, i/rb, i%rb%e.typ.TypeSize(), got[i], e.quant[i])
					}
				}
			}
			// Dequantizing llama.cpp's bytes gives back the F32 weights
			// within the type's error.
			y := make([]float32, len(e.f32))
			mustDequant(t, e.typ, e.quant, y)
			var se, ss float64
			for i := range y {
				d := float64(y[i] - e.f32[i])
				se += d * d
				ss += float64(e.f32[i]) * float64(e.f32[i])
			}
			if rel := math.Sqrt(se / ss); rel > 0.12 {
				t.Errorf("dequantized %s relative RMS error %.3g", e.typ, rel)
			}
		})
	}
}

func loadFixture(t *testing.T) []fixtureEntry {
	t.Helper()
	b, err := os.ReadFile(fixturePath)
	if err != nil {
		t.Fatalf("%v (regenerate with -update)", err)
	}
	r := bytes.NewReader(b)
	var out []fixtureEntry
	for r.Len() > 0 {
		var e fixtureEntry
		var hdr [4]uint32
		if err := binary.Read(r, binary.LittleEndian, &hdr); err != nil {
			t.Fatal(err)
		}
		e.typ, e.rows, e.cols = Type(hdr[1]), int(hdr[2]), int(hdr[3])
		name := make([]byte, hdr[0])
		io.ReadFull(r, name)
		e.tensor = string(name)
		e.f32 = make([]float32, e.rows*e.cols)
		binary.Read(r, binary.LittleEndian, e.f32)
		rb, err := e.typ.RowSize(e.cols)
		if err != nil {
			t.Fatal(err)
		}
		e.quant = make([]byte, e.rows*rb)
		if _, err := io.ReadFull(r, e.quant); err != nil {
			t.Fatal(err)
		}
		out = append(out, e)
	}
	if len(out) == 0 {
		t.Fatal("empty fixture")
	}
	return out
}

func regenerateFixture(t *testing.T) {
	dir := sharedGolden(t)
	if _, err := os.Stat(filepath.Join(dir, "tiny-qwen3moe-f32.gguf")); err != nil {
		t.Skipf("SKIPPING REGENERATION: golden fixtures missing at %s: %v", dir, err)
	}
	f32File := readGGUF(t, filepath.Join(dir, "tiny-qwen3moe-f32.gguf"))
	var buf bytes.Buffer
	for _, w := range fixtureWanted {
		q := readGGUF(t, filepath.Join(dir, w.file))
		qi, ok := q[w.tensor]
		if !ok || qi.typ != w.typ {
			t.Fatalf("%s: %s is %v, want %s", w.file, w.tensor, qi.typ, w.typ)
		}
		fi := f32File[w.tensor]
		cols := int(fi.dims[0])
		rb, _ := w.typ.RowSize(cols)
		f := make([]float32, w.rows*cols)
		mustDequant(t, F32, fi.data[:w.rows*cols*4], f)
		binary.Write(&buf, binary.LittleEndian, [4]uint32{uint32(len(w.tensor)), uint32(w.typ), uint32(w.rows), uint32(cols)})
		buf.WriteString(w.tensor)
		binary.Write(&buf, binary.LittleEndian, f)
		buf.Write(qi.data[:w.rows*rb])
	}
	if err := os.MkdirAll("testdata", 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(fixturePath, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
}

type ggufTensor struct {
	typ  Type
	dims []uint64
	data []byte
}

// readGGUF is a minimal GGUF v3 reader for regenerating test data from the
// trusted shared fixtures (the real, hardened reader is runtime/gguf).
func readGGUF(t *testing.T, path string) map[string]ggufTensor {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	pos := 0
	u32 := func() uint32 { v := binary.LittleEndian.Uint32(b[pos:]); pos += 4; return v }
	u64 := func() uint64 { v := binary.LittleEndian.Uint64(b[pos:]); pos += 8; return v }
	str := func() string { n := int(u64()); s := string(b[pos : pos+n]); pos += n; return s }
	if string(b[:4]) != "GGUF" {
		t.Fatalf("%s: not GGUF", path)
	}
	pos = 4
	if v := u32(); v != 3 {
		t.Fatalf("%s: GGUF version %d", path, v)
	}
	nt, nkv := u64(), u64()
	align := uint64(32)
	sizes := map[uint32]int{0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}
	var skip func(typ uint32)
	skip = func(typ uint32) {
		switch typ {
		case 8:
			str()
		case 9:
			et, n := u32(), u64()
			for i := uint64(0); i < n; i++ {
				skip(et)
			}
		default:
			pos += sizes[typ]
		}
	}
	for i := uint64(0); i < nkv; i++ {
		key := str()
		typ := u32()
		if key == "general.alignment" && typ == 4 {
			align = uint64(u32())
			continue
		}
		skip(typ)
	}
	type info struct {
		name string
		ggufTensor
		off uint64
	}
	infos := make([]info, nt)
	for i := range infos {
		infos[i].name = str()
		nd := u32()
		for d := uint32(0); d < nd; d++ {
			infos[i].dims = append(infos[i].dims, u64())
		}
		infos[i].typ = Type(u32())
		infos[i].off = u64()
	}
	base := (uint64(pos) + align - 1) / align * align
	out := make(map[string]ggufTensor, nt)
	for _, in := range infos {
		in.data = b[base+in.off:]
		out[in.name] = in.ggufTensor
	}
	return out
}
