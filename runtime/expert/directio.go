package expert

import "os"

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
