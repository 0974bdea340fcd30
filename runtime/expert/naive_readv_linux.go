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

// preadPages reads len(bufs) pages at off into bufs with one preadv and
// returns the bytes read.
func preadPages(f *os.File, bufs [][]byte, off int64) (int, error) {
	rc, err := f.SyscallConn()
	if err != nil {
		return 0, err
	}
	var n int
	var rerr error
	if err := rc.Read(func(fd uintptr) bool {
		for {
			n, rerr = unix.Preadv(int(fd), bufs, off)
			if !errors.Is(rerr, unix.EINTR) {
				return true
			}
		}
	}); err != nil {
		return 0, err
	}
	if rerr != nil {
		return n, &os.PathError{Op: "preadv", Path: f.Name(), Err: rerr}
	}
	if n == 0 {
		return 0, io.EOF
	}
	return n, nil
}

// isAligned reports whether b starts on a direct-I/O boundary.
func isAligned(b []byte) bool {
	return uintptr(unsafe.Pointer(unsafe.SliceData(b)))&(directAlign-1) == 0
}
