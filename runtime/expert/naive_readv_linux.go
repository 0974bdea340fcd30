//go:build linux

package expert

import (
	"errors"
	"io"
	"os"
	"unsafe"

	"golang.org/x/sys/unix"
)

// canReadv says preadPages reads into separate page buffers here.
const canReadv = true

// maxIovecs is the most buffers one preadv takes (IOV_MAX).
const maxIovecs = 1024

// preadPages reads len(bufs) pages at off into bufs, with one preadv per
// maxIovecs pages, and returns the bytes read.
func preadPages(f *os.File, bufs [][]byte, off int64) (int, error) {
	rc, err := f.SyscallConn()
	if err != nil {
		return 0, err
	}
	total := 0
	for len(bufs) > 0 {
		chunk := bufs[:min(len(bufs), maxIovecs)]
		want := 0
		for _, b := range chunk {
			want += len(b)
		}
		var n int
		var rerr error
		if err := rc.Read(func(fd uintptr) bool {
			for {
				n, rerr = unix.Preadv(int(fd), chunk, off)
				if !errors.Is(rerr, unix.EINTR) {
					return true
				}
			}
		}); err != nil {
			return total, err
		}
		if rerr != nil {
			return total, &os.PathError{Op: "preadv", Path: f.Name(), Err: rerr}
		}
		total += n
		if n < want { // the end of the file
			break
		}
		bufs, off = bufs[len(chunk):], off+int64(n)
	}
	if total == 0 {
		return 0, io.EOF
	}
	return total, nil
}

// isAligned reports whether b starts on a direct-I/O boundary.
func isAligned(b []byte) bool {
	return uintptr(unsafe.Pointer(unsafe.SliceData(b)))&(directAlign-1) == 0
}
