//go:build linux

package expert

import (
	"bytes"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"
)

// TestPreadPages reads more pages than one preadv takes (IOV_MAX), and a
// run past the end of the file, into separate page buffers.
func TestPreadPages(t *testing.T) {
	const page = 4096
	data := make([]byte, (maxIovecs+77)*page+100)
	r := rand.New(rand.NewPCG(1, 2))
	for i := range data {
		data[i] = byte(r.Uint32())
	}
	path := filepath.Join(t.TempDir(), "f")
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for _, tc := range []struct{ first, count int }{{0, maxIovecs + 78}, {3, 5}, {maxIovecs + 70, 20}} {
		bufs := make([][]byte, tc.count)
		for i := range bufs {
			bufs[i] = make([]byte, page)
		}
		var iov []iovec
		n, err := preadPages(f, bufs, int64(tc.first)*page, &iov)
		want := min(len(data)-tc.first*page, tc.count*page)
		if err != nil || n != want {
			t.Fatalf("pages %d+%d: %d bytes, %v; want %d", tc.first, tc.count, n, err, want)
		}
		got := bytes.Join(bufs, nil)[:n]
		if !bytes.Equal(got, data[tc.first*page:tc.first*page+n]) {
			t.Fatalf("pages %d+%d: data differs", tc.first, tc.count)
		}
	}
}
