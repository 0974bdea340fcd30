package gguf

import (
	"os"
	"path/filepath"
	"testing"
)

func TestOutputFile(t *testing.T) {
	for _, commit := range []bool{true, false} {
		dir := t.TempDir()
		path := filepath.Join(dir, "m.gguf")
		o, err := CreateOutput(path)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := o.Write([]byte("GGUF")); err != nil {
			t.Fatal(err)
		}
		if commit {
			if err := o.Commit(); err != nil {
				t.Fatal(err)
			}
		}
		o.Close()
		entries, _ := os.ReadDir(dir)
		if !commit {
			if len(entries) != 0 {
				t.Fatalf("uncommitted output left %v", entries)
			}
			continue
		}
		st, err := os.Stat(path)
		if err != nil || len(entries) != 1 {
			t.Fatalf("committed output: %v, entries %v", err, entries)
		}
		if st.Mode().Perm() != 0o644 || st.Size() != 4 {
			t.Fatalf("mode %v size %d", st.Mode().Perm(), st.Size())
		}
	}
}
