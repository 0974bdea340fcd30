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
	"github.com/lesfarm/lesfarm/runtime/tensor"
)

// expertBytes returns part i (0 gate, 1 up, 2 down) of expert e of layer
// l as stored in f, whatever its layout.
func expertBytes(t *testing.T, f *gguf.File, l, e, i int) []byte {
	t.Helper()
	if IsPacked(f) {
		b, err := f.ReadTensor(ExpertName(l, e, i))
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	layers, _, err := ExpertLayers(f)
	if err != nil {
		t.Fatal(err)
	}
	for _, le := range layers {
		if le.Layer == l {
			ti, off, size := le.Part(e, i)
			buf := make([]byte, size)
			if _, err := f.ReaderAt().ReadAt(buf, f.TensorOffset(ti)+off); err != nil {
				t.Fatal(err)
			}
			return buf
		}
	}
	t.Fatalf("layer %d has no experts", l)
	return nil
}

// unpad strips the compat layout's zero padding from a part padded from
// ffn to pffn: gate and up keep their first ffn rows, down rows their
// first ffn columns. It fails if a padding byte is not zero.
func unpad(t *testing.T, b []byte, part, hidden, ffn, pffn int) []byte {
	t.Helper()
	if ffn == pffn {
		return b
	}
	zero := func(p []byte) {
		if len(bytes.Trim(p, "\x00")) != 0 {
			t.Fatalf("part %d: padding is not zero", part)
		}
	}
	if part < 2 {
		keep := len(b) * ffn / pffn
		zero(b[keep:])
		return b[:keep]
	}
	outRow := len(b) / hidden
	inRow := outRow * ffn / pffn // whole blocks: bytes scale with columns
	out := make([]byte, 0, len(b))
	for r := range hidden {
		row := b[r*outRow : (r+1)*outRow]
		zero(row[inRow:])
		out = append(out, row[:inRow]...)
	}
	return out
}

// TestPackCompatRoundTrip packs qwen3moe and qwen35moe models in the compat
// layout and checks: a valid GGUF with every tensor and every expert slice
// on a page; llama.cpp's tensor names (merged gate+up for qwen35moe,
// separate for qwen3moe); metadata and non-expert tensors unchanged; every
// expert's gate, up and down byte-identical to the source once the zero
// padding is removed. The compat file is then packed again (as the input of
// a merged-gate+up model) into the blob and the split compat layouts, which
// must hold the same expert bytes.
func TestPackCompatRoundTrip(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		rel     string
		merged  bool
		padFrom int // expert FFN padded from this width (0: no padding)
		padTo   int
	}{
		{"repo/" + fx.RepoQ4KM, false, 128, 256},
		{"trained/tiny-moe-kjv-f16.gguf", false, 0, 0},
		{"qwen35moe/tiny-qwen35moe-f32.gguf", true, 0, 0},
		{"qwen35moe/tiny-qwen35moe-q4_k_m.gguf", true, 64, 256},
	} {
		t.Run(fixtureName(tc.rel), func(t *testing.T) {
			t.Parallel()
			in := fixture(t, tc.rel)
			dir := t.TempDir()
			out := filepath.Join(dir, "compat.gguf")
			if err := Pack(context.Background(), in, out, Options{Layout: LayoutCompat}); err != nil {
				t.Fatal(err)
			}
			src, err := gguf.Open(in)
			if err != nil {
				t.Fatal(err)
			}
			defer src.Close()
			dst, err := gguf.Open(out)
			if err != nil {
				t.Fatalf("compat file is not a valid GGUF: %v", err)
			}
			defer dst.Close()
			if !IsCompat(dst) || IsPacked(dst) || IsCompat(src) {
				t.Fatalf("IsCompat %v IsPacked %v on the compat file", IsCompat(dst), IsPacked(dst))
			}
			arch := src.Architecture()
			ffnKey := arch + ".expert_feed_forward_length"
			for _, kv := range src.KVs() {
				v, ok := dst.Value(kv.Key)
				switch {
				case kv.Key == "general.alignment":
				case !ok:
					t.Fatalf("metadata %s not copied", kv.Key)
				case kv.Key == ffnKey && tc.padTo > 0:
					if n, _ := v.Uint(); int(n) != tc.padTo {
						t.Fatalf("%s = %d, want the padded %d", ffnKey, n, tc.padTo)
					}
				case v.String() != kv.Value.String():
					t.Fatalf("metadata %s changed: %s -> %s", kv.Key, kv.Value, v)
				}
			}
			if n, err := dst.Uint(KeyExpertFFN); (tc.padTo > 0) != (err == nil) || (err == nil && int(n) != tc.padFrom) {
				t.Fatalf("%s = %d (%v), padded %v", KeyExpertFFN, n, err, tc.padTo > 0)
			}
			layers, _, err := ExpertLayers(dst)
			if err != nil {
				t.Fatal(err)
			}
			srcLayers, _, _ := ExpertLayers(src)
			if len(layers) != len(srcLayers) || len(layers) == 0 {
				t.Fatalf("%d expert layers, source %d", len(layers), len(srcLayers))
			}
			for _, ti := range dst.Tensors() {
				if dst.TensorOffset(ti)%Alignment != 0 {
					t.Fatalf("tensor %s at %d is not page-aligned", ti.Name, dst.TensorOffset(ti))
				}
				if _, _, ok := parseExpertName(ti.Name); ok {
					continue
				}
				want, _ := src.ReadTensor(ti.Name)
				got, err := dst.ReadTensor(ti.Name)
				if err != nil || !bytes.Equal(got, want) {
					t.Fatalf("tensor %s differs (%v)", ti.Name, err)
				}
			}
			for k, le := range layers {
				if le.Merged() != tc.merged {
					t.Fatalf("layer %d: merged %v, want %v for %s", le.Layer, le.Merged(), tc.merged, arch)
				}
				sle := srcLayers[k]
				for e := range le.Experts {
					for i := range 3 {
						ti, off, _ := le.Part(e, i)
						if i != 1 || !le.Merged() { // a merged up half follows gate and need not be aligned
							if (dst.TensorOffset(ti)+off)%Alignment != 0 {
								t.Fatalf("layer %d expert %d part %d at %d is not page-aligned", le.Layer, e, i, dst.TensorOffset(ti)+off)
							}
						}
						got := unpad(t, expertBytes(t, dst, le.Layer, e, i), i, le.Hidden, sle.FFN, le.FFN)
						if !bytes.Equal(got, expertBytes(t, src, le.Layer, e, i)) {
							t.Fatalf("layer %d expert %d part %d differs from the source", le.Layer, e, i)
						}
					}
				}
			}
			if tc.padTo > 0 {
				return // re-packing a padded file keeps the padding; covered above
			}
			// The compat file as input: merged (or split) stacked tensors in,
			// blob and the other compat form out.
			for _, opts := range []Options{{}, {Layout: LayoutCompat, GateUp: GateUpSplit}, {Layout: LayoutCompat, GateUp: GateUpMerged}} {
				again := filepath.Join(dir, "again-"+opts.Layout+opts.GateUp+".gguf")
				if err := Pack(context.Background(), out, again, opts); err != nil {
					t.Fatalf("%+v: %v", opts, err)
				}
				g, err := gguf.Open(again)
				if err != nil {
					t.Fatal(err)
				}
				for _, le := range srcLayers {
					for e := range le.Experts {
						for i := range 3 {
							if !bytes.Equal(expertBytes(t, g, le.Layer, e, i), expertBytes(t, src, le.Layer, e, i)) {
								t.Fatalf("%+v: layer %d expert %d part %d differs", opts, le.Layer, e, i)
							}
						}
					}
				}
				if src, _ := g.String(KeySource); src != "compat.gguf" {
					t.Errorf("%s = %q", KeySource, src)
				}
				g.Close()
			}
		})
	}
}

// TestPackCompatBadInput checks one-line errors for model files whose
// expert tensors are missing or inconsistent, and for bad options.
func TestPackCompatBadInput(t *testing.T) {
	t.Parallel()
	in := fixture(t, "qwen35moe/tiny-qwen35moe-f32.gguf")
	src, err := gguf.Open(in)
	if err != nil {
		t.Fatal(err)
	}
	src.Close()
	dir := t.TempDir()
	for _, tc := range []struct {
		name string
		edit func(name string, dims []uint64) (string, []uint64, bool) // new name, dims, keep
		opts Options
		want string
	}{
		{"missing down", func(n string, d []uint64) (string, []uint64, bool) { return n, d, n != "blk.2.ffn_down_exps.weight" }, Options{Layout: LayoutCompat}, "layer 2 lacks blk.2.ffn_down_exps.weight"},
		{"missing up", func(n string, d []uint64) (string, []uint64, bool) { return n, d, n != "blk.0.ffn_up_exps.weight" }, Options{}, "layer 0 lacks blk.0.ffn_up_exps.weight"},
		{"merged and split", func(n string, d []uint64) (string, []uint64, bool) {
			if n == "blk.1.ffn_up_exps.weight" {
				return "blk.1.ffn_gate_up_exps.weight", d, true
			}
			return n, d, true
		}, Options{Layout: LayoutCompat}, "has both blk.1.ffn_gate_up_exps.weight and separate"},
		{"expert count", func(n string, d []uint64) (string, []uint64, bool) {
			if n == "blk.3.ffn_up_exps.weight" {
				return n, []uint64{d[0], d[1] * 2, d[2] / 2}, true
			}
			return n, d, true
		}, Options{Layout: LayoutCompat}, "blk.3.ffn_up_exps.weight has 8 experts, other parts 16"},
		{"width", func(n string, d []uint64) (string, []uint64, bool) {
			if n == "blk.4.ffn_gate_exps.weight" {
				return n, []uint64{d[0] / 2, d[1] * 2, d[2]}, true
			}
			return n, d, true
		}, Options{Layout: LayoutCompat}, "blk.4.ffn_gate_exps.weight has dims [128 128 16]"},
		{"2-D expert tensor", func(n string, d []uint64) (string, []uint64, bool) {
			if n == "blk.5.ffn_down_exps.weight" {
				return n, []uint64{d[0], d[1] * d[2]}, true
			}
			return n, d, true
		}, Options{}, "blk.5.ffn_down_exps.weight has dims [64 4096]"},
		{"bad layout", nil, Options{Layout: "zip"}, `unknown layout "zip"`},
		{"bad gate-up", nil, Options{Layout: LayoutCompat, GateUp: "fused"}, `unknown gate/up storage "fused"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := in
			if tc.edit != nil {
				p = rewriteTensors(t, in, filepath.Join(dir, strings.ReplaceAll(tc.name, " ", "-")+".gguf"), tc.edit)
			}
			err := Pack(context.Background(), p, filepath.Join(dir, "out.gguf"), tc.opts)
			if err == nil || !strings.Contains(err.Error(), tc.want) || strings.Contains(err.Error(), "\n") {
				t.Fatalf("error %v, want one line containing %q", err, tc.want)
			}
		})
	}
}

// rewriteTensors copies the GGUF at in to out with each tensor renamed,
// re-dimensioned (same element count) or dropped by edit; metadata and
// tensor data are kept.
func rewriteTensors(t *testing.T, in, out string, edit func(name string, dims []uint64) (string, []uint64, bool)) string {
	t.Helper()
	f, err := gguf.Open(in)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var buf bytes.Buffer
	w := gguf.NewWriter(&buf)
	for _, kv := range f.KVs() {
		if err := w.AddKV(kv.Key, kv.Value); err != nil {
			t.Fatal(err)
		}
	}
	type kept struct {
		name string
		ti   *gguf.TensorInfo
	}
	var ks []kept
	for _, ti := range f.Tensors() {
		name, dims, keep := edit(ti.Name, ti.Dims)
		if !keep {
			continue
		}
		if err := w.AddTensor(name, ti.Type, dims); err != nil {
			t.Fatal(err)
		}
		ks = append(ks, kept{name, ti})
	}
	if err := w.WriteHeader(); err != nil {
		t.Fatal(err)
	}
	for _, k := range ks {
		data, err := f.ReadTensor(k.ti.Name)
		if err != nil {
			t.Fatal(err)
		}
		if err := w.WriteTensor(k.name, data); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if err := writeFile(out, buf.Bytes()); err != nil {
		t.Fatal(err)
	}
	return out
}

func writeFile(p string, b []byte) error { return os.WriteFile(p, b, 0o644) }

// FuzzExpertLayers: ExpertLayers never panics on hostile expert tensor
// infos, and every part of every expert it accepts lies inside its tensor.
func FuzzExpertLayers(f *testing.F) {
	f.Add(uint64(256), uint64(64), uint64(16), uint64(64), uint64(256), uint64(16), true, uint8(0))
	f.Add(uint64(256), uint64(63), uint64(16), uint64(64), uint64(256), uint64(8), false, uint8(2))
	f.Add(uint64(0), uint64(0), uint64(0), uint64(1<<40), uint64(1), uint64(1<<20), true, uint8(8))
	f.Fuzz(func(t *testing.T, c0, r0, e0, c1, r1, e1 uint64, merged bool, typ uint8) {
		var buf bytes.Buffer
		w := gguf.NewWriter(&buf)
		names := []string{StackedName(0, 0), StackedName(0, 1), StackedName(0, 2)}
		dims := [][]uint64{{c0, r0, e0}, {c0, r0, e0}, {c1, r1, e1}}
		if merged {
			names, dims = []string{MergedName(0), StackedName(0, 2)}, [][]uint64{{c0, 2 * r0, e0}, {c1, r1, e1}}
		}
		for i, n := range names {
			tt := []tensor.Type{tensor.F32, tensor.F16, tensor.Q8_0, tensor.Q4_K, tensor.Q6_K, tensor.Q5_0}[typ%6]
			if w.AddTensor(n, tt, dims[i]) != nil {
				return
			}
		}
		if w.WriteHeader() != nil {
			return
		}
		// Only the header is needed: claim the data section's size.
		g, err := gguf.Parse(bytes.NewReader(buf.Bytes()), int64(buf.Len())+w.DataSize())
		if err != nil {
			return
		}
		layers, _, err := ExpertLayers(g)
		if err != nil {
			return
		}
		for _, le := range layers {
			for e := range le.Experts {
				for i := range 3 {
					ti, off, size := le.Part(e, i)
					if off < 0 || size <= 0 || off+size > ti.Size {
						t.Fatalf("expert %d part %d at [%d, %d) outside %s of %d bytes", e, i, off, off+size, ti.Name, ti.Size)
					}
				}
			}
		}
	})
}

// TestPackOutputReadable: packed files are readable by others (a model is
// not secret), in both layouts.
func TestPackOutputReadable(t *testing.T) {
	t.Parallel()
	in := fixture(t, "qwen35moe/tiny-qwen35moe-f32.gguf")
	for _, lay := range []string{LayoutBlob, LayoutCompat} {
		out := filepath.Join(t.TempDir(), lay+".gguf")
		if err := Pack(context.Background(), in, out, Options{Layout: lay}); err != nil {
			t.Fatal(err)
		}
		if st, err := os.Stat(out); err != nil || st.Mode().Perm() != 0o644 {
			t.Fatalf("%s: mode %v (%v), want 0644", lay, st.Mode().Perm(), err)
		}
	}
}
