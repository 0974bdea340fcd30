package pack

import (
	"bytes"
	"context"
	fx "github.com/lesfarm/lesfarm/internal/fixture"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/lesfarm/lesfarm/runtime/gguf"
)

// fixture returns a test model: "repo/PATH" is a fixture the repository
// owns (never skipped), anything else is in the shared tier.
func fixture(t *testing.T, rel string) string {
	t.Helper()
	if r, ok := strings.CutPrefix(rel, "repo/"); ok {
		return fx.Repo(t, r)
	}
	p := filepath.Join(fx.SharedDir(), rel)
	if _, err := os.Stat(p); err != nil {
		fx.Missing(t, p, err, "pack on this fixture")
	}
	return p
}

// fixtureName names a subtest after its fixture, marking the repo's own.
func fixtureName(rel string) string {
	if strings.HasPrefix(rel, "repo/") {
		return "repo-" + filepath.Base(rel)
	}
	return filepath.Base(rel)
}

func TestPackLayout(t *testing.T) {
	t.Parallel()
	for _, rel := range []string{"repo/" + fx.RepoQ4KM, "golden/tiny-qwen3moe-mixed.gguf", "trained/tiny-moe-kjv-f16.gguf"} {
		t.Run(fixtureName(rel), func(t *testing.T) {
			t.Parallel()
			in := fixture(t, rel)
			out := filepath.Join(t.TempDir(), "p.gguf")
			var last, total int64
			err := Pack(context.Background(), in, out, Options{Progress: func(d, n int64) {
				if d < last || d > n {
					t.Errorf("progress %d/%d after %d", d, n, last)
				}
				last, total = d, n
			}})
			if err != nil {
				t.Fatal(err)
			}
			if last != total || total == 0 {
				t.Fatalf("progress ended at %d of %d", last, total)
			}
			src, err := gguf.Open(in)
			if err != nil {
				t.Fatal(err)
			}
			defer src.Close()
			dst, err := gguf.Open(out)
			if err != nil {
				t.Fatalf("packed file is not a valid GGUF: %v", err)
			}
			defer dst.Close()
			if !IsPacked(dst) || IsPacked(src) {
				t.Fatal("IsPacked wrong")
			}
			if dst.Alignment != Alignment || dst.DataOffset%Alignment != 0 {
				t.Fatalf("alignment %d, data offset %d", dst.Alignment, dst.DataOffset)
			}
			// Metadata is carried over.
			for _, kv := range src.KVs() {
				if kv.Key == "general.alignment" {
					continue
				}
				v, ok := dst.Value(kv.Key)
				if !ok || v.String() != kv.Value.String() {
					t.Fatalf("metadata %s not copied", kv.Key)
				}
			}
			layers, _ := src.Uint(src.Architecture() + ".block_count")
			blobs, err := Blobs(dst, int(layers))
			if err != nil {
				t.Fatal(err)
			}
			// Non-expert tensors are identical; every expert's three parts
			// are the slices of the stacked tensors, in one aligned blob.
			for _, ti := range src.Tensors() {
				want, err := src.ReadTensor(ti.Name)
				if err != nil {
					t.Fatal(err)
				}
				l, part, stacked := parseStacked(ti.Name)
				if !stacked {
					got, err := dst.ReadTensor(ti.Name)
					if err != nil || !bytes.Equal(got, want) {
						t.Fatalf("tensor %s differs (%v)", ti.Name, err)
					}
					continue
				}
				if _, ok := dst.Tensor(ti.Name); ok {
					t.Fatalf("stacked tensor %s still present", ti.Name)
				}
				b := blobs[l]
				sz := ti.Size / int64(b.Experts)
				for e := range b.Experts {
					name := ExpertName(l, e, part)
					got, err := dst.ReadTensor(name)
					if err != nil || !bytes.Equal(got, want[int64(e)*sz:int64(e+1)*sz]) {
						t.Fatalf("%s differs (%v)", name, err)
					}
					blob := dst.DataOffset + b.Offset + int64(e)*b.Stride
					if blob%Alignment != 0 {
						t.Fatalf("layer %d expert %d blob at %d is not page-aligned", l, e, blob)
					}
					if b.Size > b.Stride || b.Size > b.Parts[0][1]+b.Parts[1][1]+b.Parts[2][1]+2*Alignment {
						t.Fatalf("blob size %d, stride %d, part %d", b.Size, b.Stride, sz)
					}
				}
			}
			// Packing a packed file is refused.
			if err := Pack(context.Background(), out, out+"2", Options{}); err == nil || !strings.Contains(err.Error(), "already packed") {
				t.Fatalf("repack: %v", err)
			}
		})
	}
}

func TestPackBadInput(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	if err := Pack(context.Background(), filepath.Join(dir, "none.gguf"), filepath.Join(dir, "o.gguf"), Options{}); err == nil {
		t.Fatal("missing input accepted")
	}
	bad := filepath.Join(dir, "bad.gguf")
	os.WriteFile(bad, []byte("not a gguf file at all"), 0o644)
	if err := Pack(context.Background(), bad, filepath.Join(dir, "o.gguf"), Options{}); err == nil {
		t.Fatal("garbage accepted")
	}
	t.Run("dense", func(t *testing.T) {
		dense := fixture(t, "trained/tiny-draft-kjv-f32.gguf")
		if err := Pack(context.Background(), dense, filepath.Join(dir, "o.gguf"), Options{}); err == nil || !strings.Contains(err.Error(), "no stacked expert") {
			t.Fatalf("dense model: %v", err)
		}
		if _, err := os.Stat(filepath.Join(dir, "o.gguf")); err == nil {
			t.Fatal("a failed pack left an output file")
		}
	})
	in := fixture(t, "repo/"+fx.RepoQ4KM)
	if err := Pack(context.Background(), in, in, Options{}); err == nil {
		t.Fatal("in-place pack accepted")
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := Pack(ctx, in, filepath.Join(dir, "c.gguf"), Options{}); err == nil {
		t.Fatal("cancelled pack succeeded")
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 1 { // bad.gguf and nothing else
		var names []string
		for _, e := range ents {
			names = append(names, e.Name())
		}
		t.Fatalf("leftover files: %v", names)
	}
}

func FuzzBlobs(f *testing.F) {
	f.Add(uint64(0), uint64(4096), uint64(100), uint32(2), int64(0), int64(10))
	f.Add(uint64(1<<63), uint64(0), uint64(0), uint32(0), int64(-1), int64(-5))
	f.Fuzz(func(t *testing.T, off, stride, size uint64, experts uint32, p0, p1 int64) {
		var buf bytes.Buffer
		w := gguf.NewWriter(&buf)
		w.AddKV(KeyVersion, uint32(Version))
		w.AddKV(KeyLayers, []int32{0})
		w.AddKV("les.pack.blk.0.offset", off)
		w.AddKV("les.pack.blk.0.stride", stride)
		w.AddKV("les.pack.blk.0.size", size)
		w.AddKV("les.pack.blk.0.experts", experts%8)
		w.AddKV("les.pack.blk.0.parts", []int64{p0, p1, p0, p1, p0, p1})
		w.AddTensor(ExpertName(0, 0, 0), 0, []uint64{4})
		if err := w.WriteHeader(); err != nil {
			return
		}
		w.WriteTensor(ExpertName(0, 0, 0), make([]byte, 16))
		w.Close()
		g, err := gguf.Parse(bytes.NewReader(buf.Bytes()), int64(buf.Len()))
		if err != nil {
			return
		}
		bl, err := Blobs(g, 1)
		if err != nil {
			return
		}
		// Whatever Blobs accepts must match the tensor infos.
		if b := bl[0]; b != nil && b.Experts > 0 {
			ti, _ := g.Tensor(ExpertName(0, 0, 0))
			if ti.Offset != b.Offset+b.Parts[0][0] || ti.Size != b.Parts[0][1] {
				t.Fatalf("accepted inconsistent blob %+v", b)
			}
		}
	})
}
