package artifact

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"os"
	"path/filepath"
	"testing"
	"time"
)

func digest(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

func TestPut(t *testing.T) {
	t.Parallel()
	data := bytes.Repeat([]byte("lesfarm"), 10000)
	sum := digest(data)
	tests := []struct {
		name    string
		opt     PutOptions
		maxSize int64
		wantErr error
	}{
		{"plain", PutOptions{Size: -1}, 0, nil},
		{"expected digest and size", PutOptions{SHA256: sum, Size: int64(len(data))}, 0, nil},
		{"wrong digest", PutOptions{SHA256: digest([]byte("x")), Size: -1}, 0, ErrDigestMismatch},
		{"malformed digest", PutOptions{SHA256: "../../etc/passwd", Size: -1}, 0, ErrBadDigest},
		{"wrong size", PutOptions{Size: 5}, 0, ErrSizeMismatch},
		{"over cap", PutOptions{Size: -1}, int64(len(data) - 1), ErrTooLarge},
		{"declared over cap", PutOptions{Size: int64(len(data))}, int64(len(data) - 1), ErrTooLarge},
		{"exactly cap", PutOptions{Size: -1}, int64(len(data)), nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			f, err := New(Config{Dir: dir, MaxSize: tc.maxSize})
			if err != nil {
				t.Fatal(err)
			}
			info, err := f.Put(bytes.NewReader(data), tc.opt)
			if !errors.Is(err, tc.wantErr) {
				t.Fatalf("Put error = %v, want %v", err, tc.wantErr)
			}
			tmp, _ := os.ReadDir(filepath.Join(dir, "tmp"))
			if len(tmp) != 0 {
				t.Fatalf("temporary files left behind: %d", len(tmp))
			}
			if tc.wantErr != nil {
				if list, _ := f.List(); len(list) != 0 {
					t.Fatalf("failed Put stored %v", list)
				}
				return
			}
			if info.SHA256 != sum || info.Size != int64(len(data)) || !info.Created {
				t.Fatalf("info = %+v", info)
			}
			fh, err := f.Open(sum)
			if err != nil {
				t.Fatal(err)
			}
			defer fh.Close()
			got, _ := io.ReadAll(fh)
			if !bytes.Equal(got, data) {
				t.Fatal("stored content differs")
			}
		})
	}
}

func TestPutDeduplicates(t *testing.T) {
	t.Parallel()
	f, err := New(Config{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	var last int64
	a, err := f.Put(bytes.NewReader([]byte("same")), PutOptions{Size: -1, Progress: func(n int64) { last = n }})
	if err != nil || !a.Created || last != 4 {
		t.Fatalf("first put: %+v %v progress=%d", a, err, last)
	}
	b, err := f.Put(bytes.NewReader([]byte("same")), PutOptions{Size: -1})
	if err != nil || b.Created || b.SHA256 != a.SHA256 {
		t.Fatalf("second put: %+v %v", b, err)
	}
	list, _ := f.List()
	if len(list) != 1 {
		t.Fatalf("List = %v", list)
	}
	if err := f.Remove(a.SHA256); err != nil {
		t.Fatal(err)
	}
	if _, err := f.Open(a.SHA256); !errors.Is(err, ErrNotFound) {
		t.Fatalf("Open after Remove: %v", err)
	}
	if err := f.Remove(a.SHA256); err != nil {
		t.Fatalf("second Remove: %v", err)
	}
}

func TestSweep(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	f, err := New(Config{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	old := filepath.Join(dir, "tmp", "upload-old")
	fresh := filepath.Join(dir, "tmp", "upload-fresh")
	for _, p := range []string{old, fresh} {
		if err := os.WriteFile(p, []byte("x"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	past := time.Now().Add(-2 * time.Hour)
	os.Chtimes(old, past, past)
	n, err := f.Sweep(time.Hour)
	if err != nil || n != 1 {
		t.Fatalf("Sweep = %d, %v", n, err)
	}
	if _, err := os.Stat(fresh); err != nil {
		t.Fatalf("fresh upload removed: %v", err)
	}
}

func FuzzValidDigest(f *testing.F) {
	f.Add("0000000000000000000000000000000000000000000000000000000000000000")
	f.Add("../../../../../../../../../../../../../../../../../../etc/passwd")
	f.Add("")
	f.Fuzz(func(t *testing.T, s string) {
		fs := &Files{dir: "/store"}
		p, err := fs.Path(s)
		if err != nil {
			return
		}
		if filepath.Dir(filepath.Dir(p)) != "/store/sha256" || filepath.Base(p) != s {
			t.Fatalf("digest %q escapes the store: %s", s, p)
		}
	})
}
