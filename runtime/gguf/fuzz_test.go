package gguf

import (
	"bytes"
	"flag"
	"os"
	"path/filepath"
	"testing"
)

var update = flag.Bool("update", false, "rewrite testdata/small.gguf")

// TestSeedFile keeps testdata/small.gguf (the fuzz seed) in sync with
// sampleFile; run with -update after changing sampleFile.
func TestSeedFile(t *testing.T) {
	p, _ := sampleFile(t, 0)
	path := filepath.Join("testdata", "small.gguf")
	if *update {
		if err := os.WriteFile(path, p, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	got, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test ./runtime/gguf -run TestSeedFile -update)", err)
	}
	if !bytes.Equal(got, p) {
		t.Fatalf("%s is stale (run go test ./runtime/gguf -run TestSeedFile -update)", path)
	}
}

// FuzzParse feeds arbitrary bytes to Parse. It must never panic; a file it
// accepts must answer every accessor and survive a copy through the Writer.
func FuzzParse(f *testing.F) {
	p, _ := sampleFile(f, 0)
	f.Add(p)
	p64, _ := sampleFile(f, 64)
	f.Add(p64)
	if seed, err := os.ReadFile(filepath.Join("testdata", "small.gguf")); err == nil {
		f.Add(seed)
	}
	f.Add(new(raw).header(1, 1).str("general.alignment").u32(uint32(TypeUint32)).u32(64).tinfo("x", 0, 0, 4, 2).pad(64).u64(0).u64(0).u64(0).u64(0).Bytes())
	f.Add(new(raw).header(0, 1).str("k").u32(uint32(TypeArray)).u32(uint32(TypeString)).u64(2).str("a").str("bc").Bytes())
	f.Add([]byte("GGUF"))
	f.Fuzz(func(t *testing.T, data []byte) {
		gf, err := Parse(bytes.NewReader(data), int64(len(data)))
		if err != nil {
			return
		}
		for _, kv := range gf.KVs() {
			v := kv.Value
			_ = v.String()
			v.Uint()
			v.Int()
			v.Float()
			v.Bool()
			gf.Strings(kv.Key)
			gf.Int32s(kv.Key)
			gf.Int64s(kv.Key)
			gf.Float32s(kv.Key)
			v.Bools()
		}
		var out bytes.Buffer
		w := NewWriter(&out)
		for _, kv := range gf.KVs() {
			if err := w.AddKV(kv.Key, kv.Value); err != nil {
				t.Fatalf("copy metadata %q: %v", kv.Key, err)
			}
		}
		for _, ti := range gf.Tensors() {
			if ti.Size < 0 || gf.DataOffset+ti.Offset+ti.Size > gf.Size {
				t.Fatalf("tensor %q outside the file after a successful parse", ti.Name)
			}
			if err := w.AddTensor(ti.Name, ti.Type, ti.Dims); err != nil {
				t.Fatalf("copy tensor info %q: %v", ti.Name, err)
			}
		}
		if err := w.WriteHeader(); err != nil {
			t.Fatal(err)
		}
		for _, ti := range gf.Tensors() {
			data, err := gf.ReadTensor(ti.Name)
			if err != nil {
				t.Fatalf("read tensor %q: %v", ti.Name, err)
			}
			if err := w.WriteTensor(ti.Name, data); err != nil {
				t.Fatal(err)
			}
		}
		if err := w.Close(); err != nil {
			t.Fatal(err)
		}
		g2, err := Parse(bytes.NewReader(out.Bytes()), int64(out.Len()))
		if err != nil {
			t.Fatalf("re-parse of the copy: %v", err)
		}
		if len(g2.KVs()) != len(gf.KVs()) || len(g2.Tensors()) != len(gf.Tensors()) || g2.Alignment != gf.Alignment {
			t.Fatalf("copy has %d kvs %d tensors alignment %d, want %d %d %d", len(g2.KVs()), len(g2.Tensors()), g2.Alignment, len(gf.KVs()), len(gf.Tensors()), gf.Alignment)
		}
	})
}
