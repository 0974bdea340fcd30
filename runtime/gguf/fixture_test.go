package gguf

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/lesfarm/lesfarm/internal/fixture"
)

// sharedTestdata returns ../shared/testdata relative to the repository root,
// or skips loudly when it is missing.
func sharedTestdata(t testing.TB) string {
	t.Helper()
	dir := fixture.SharedDir()
	if _, err := os.Stat(dir); err != nil {
		fixture.Missing(t, dir, err, "the real-model GGUF checks")
	}
	return dir
}

// TestFixtures opens every real GGUF fixture and checks that the tensors
// tile the data section exactly as llama.cpp's writer lays them out.
func TestFixtures(t *testing.T) {
	// The repository's own copy of the golden Q4_K_M always runs; the
	// shared tier adds the other real models.
	files := []string{fixture.Repo(t, fixture.RepoQ4KM)}
	shared, _ := filepath.Glob(filepath.Join(fixture.SharedDir(), "*", "*.gguf"))
	if len(shared) == 0 {
		t.Run("shared", func(t *testing.T) {
			fixture.Missing(t, filepath.Join(fixture.SharedDir(), "*", "*.gguf"), os.ErrNotExist, "the real-model GGUF checks on the shared tier")
		})
	}
	files = append(files, shared...)
	for _, path := range files {
		t.Run(filepath.Base(path), func(t *testing.T) {
			f, err := Open(path)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			if f.Version != 3 || f.Alignment != 32 {
				t.Errorf("version %d alignment %d", f.Version, f.Alignment)
			}
			if f.Architecture() == "" {
				t.Error("no general.architecture")
			}
			var next int64
			for _, ti := range f.Tensors() {
				if ti.Offset != next {
					t.Errorf("tensor %q at offset %d, want %d", ti.Name, ti.Offset, next)
				}
				rs, err := ti.Type.RowSize(int(ti.Dims[0]))
				if err != nil {
					t.Fatal(err)
				}
				if want := int64(rs) * ti.Elements() / int64(ti.Dims[0]); ti.Size != want {
					t.Errorf("tensor %q size %d, want %d", ti.Name, ti.Size, want)
				}
				next = alignUp(ti.Offset+ti.Size, f.Alignment)
			}
			if f.DataOffset+next != f.Size {
				t.Errorf("tensors end at %d, file is %d bytes", f.DataOffset+next, f.Size)
			}
			toks, err := f.Strings("tokenizer.ggml.tokens")
			if err != nil || len(toks) != 4096 {
				t.Errorf("tokens: %d, %v", len(toks), err)
			}
			last := f.Tensors()[len(f.Tensors())-1]
			r, err := f.TensorReader(last.Name)
			if err != nil || r.Size() != last.Size {
				t.Errorf("TensorReader(%q): %v", last.Name, err)
			}
			data, err := f.ReadTensor(last.Name)
			if err != nil || int64(len(data)) != last.Size {
				t.Errorf("ReadTensor(%q): %d bytes, %v", last.Name, len(data), err)
			}
		})
	}
}
