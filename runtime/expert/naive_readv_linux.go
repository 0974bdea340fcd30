//go:build linux

package expert

import (
	"io"
	"math/bits"
	"os"
	"unsafe"

	"golang.org/x/sys/unix"
)

// canReadv says preadPages reads into separate page buffers here.
const canReadv = true

// maxIovecs is the most buffers one preadv takes (IOV_MAX).
const maxIovecs = 1024

// preadPages reads len(bufs) pages at off into bufs, with one preadv per
// maxIovecs pages, and returns the bytes read. It allocates nothing
// (iov is the caller's, reused): a process capped at its budget has no
// room for the garbage of a read per fault.
func preadPages(f *os.File, bufs [][]byte, off int64, iov *[]iovec) (int, error) {
	fd := f.Fd()
	total := 0
	for len(bufs) > 0 {
		chunk := bufs[:min(len(bufs), maxIovecs)]
		v := (*iov)[:0]
		want := 0
		for _, b := range chunk {
			var e iovec
			e.Base = unsafe.SliceData(b)
			e.SetLen(len(b))
			v = append(v, e)
			want += len(b)
		}
		*iov = v
		var n uintptr
		var errno unix.Errno
		for {
			n, _, errno = unix.Syscall6(unix.SYS_PREADV, fd, uintptr(unsafe.Pointer(unsafe.SliceData(v))), uintptr(len(v)), uintptr(off), uintptr(uint64(off)>>(bits.UintSize-1)>>1), 0)
			if errno != unix.EINTR {
				break
			}
		}
		if errno != 0 {
			return total, &os.PathError{Op: "preadv", Path: f.Name(), Err: errno}
		}
		total += int(n)
		if int(n) < want { // the end of the file
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

type iovec = unix.Iovec
