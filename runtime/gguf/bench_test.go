package gguf

import (
	"bytes"

	"path/filepath"
	"testing"
)

// BenchmarkParse parses the header, metadata (4096-token vocabulary, lazily)
// and 51 tensor infos of the golden F32 model from memory.
func BenchmarkParse(b *testing.B) {
	path := filepath.Join(sharedTestdata(b), "golden", "tiny-qwen3moe-f32.gguf")
	f, err := Open(path)
	if err != nil {
		b.Fatal(err)
	}
	head := make([]byte, f.DataOffset)
	f.ReaderAt().ReadAt(head, 0)
	size := f.Size
	f.Close()
	r := bytes.NewReader(head)
	b.ReportAllocs()
	for b.Loop() {
		// Parse checks tensor data bounds against size, which is the real
		// file size; the data bytes themselves are never read.
		if _, err := Parse(&sizedReader{r, size}, size); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkVocab decodes the 4096-string token array.
func BenchmarkVocab(b *testing.B) {
	f, err := Open(filepath.Join(sharedTestdata(b), "golden", "tiny-qwen3moe-f32.gguf"))
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	b.ReportAllocs()
	for b.Loop() {
		if _, err := f.Strings("tokenizer.ggml.tokens"); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkWriteTensorData streams 64 MiB of tensor data through a Writer.
func BenchmarkWriteTensorData(b *testing.B) {
	data := make([]byte, 64<<20)
	b.SetBytes(int64(len(data)))
	b.ReportAllocs()
	for b.Loop() {
		w := NewWriter(discard{})
		w.AddTensor("t", 0, []uint64{uint64(len(data) / 4)})
		w.WriteHeader()
		if err := w.WriteTensor("t", data); err != nil {
			b.Fatal(err)
		}
		if err := w.Close(); err != nil {
			b.Fatal(err)
		}
	}
}

type discard struct{}

func (discard) Write(p []byte) (int, error) { return len(p), nil }

// sizedReader serves the header bytes and zeros past them.
type sizedReader struct {
	r    *bytes.Reader
	size int64
}

func (s *sizedReader) ReadAt(p []byte, off int64) (int, error) {
	if off < s.r.Size() {
		return s.r.ReadAt(p, off)
	}
	clear(p)
	return len(p), nil
}
