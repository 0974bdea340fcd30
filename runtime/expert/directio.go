package expert

import (
	"errors"
	"os"
)

// OpenForReads opens path for reading, with O_DIRECT (F_NOCACHE on Darwin)
// when direct is set and the file system supports it, as the store does; it
// reports whether direct I/O is in use. Reads of a direct file need
// buffers, offsets and sizes aligned to DirectAlign (AlignedBuffer).
func OpenForReads(path string, direct bool) (*os.File, bool, error) {
	return openModel(path, direct)
}

// DirectAlign is the alignment direct reads need.
const DirectAlign = directAlign

// AlignedBuffer returns a zeroed n-byte slice aligned to DirectAlign.
func AlignedBuffer(n int64) []byte { return alignedBuf(n) }

// ReadPages reads len(bufs) page buffers from off with preadv, as the
// naive mode's faults read (one vector of page-sized buffers; O_DIRECT
// needs each aligned), and returns the bytes read. Where preadv is not
// available it returns errors.ErrUnsupported.
func ReadPages(f *os.File, bufs [][]byte, off int64) (int, error) {
	if !canReadv {
		return 0, errors.ErrUnsupported
	}
	var iov []iovec
	return preadPages(f, bufs, off, &iov)
}
