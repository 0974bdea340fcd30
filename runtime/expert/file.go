package expert

import (
	"errors"
	"fmt"
	"io"
	"os"
	"sort"
	"unsafe"
)

// directAlign is the alignment O_DIRECT needs for buffers, offsets and sizes
// (the page size; also the logical block size of every device we target).
const directAlign = 4096

// Extent is a byte range of the model file (absolute offset).
type Extent struct {
	Off, Len int64
}

// Layout says where each expert's gate, up and down data live in the file:
// Experts[layer][expert] = {gate, up, down}. A packed file (lesfarm pack)
// has the three adjacent in one page-aligned blob, so one read fetches an
// expert; an unpacked GGUF stores each in its own stacked tensor, so an
// expert takes three reads.
type Layout struct {
	Packed  bool
	Experts [][][3]Extent
}

// mergeGap is the largest hole between two parts of an expert that is read
// through rather than split into two reads.
const mergeGap = 8 << 10

// readRun is one pread: file range [off, off+n) into buf[bufOff:].
type readRun struct {
	off, n, bufOff int64
}

// readPlan is how to read one expert: the preads and where each part lands
// in the buffer.
type readPlan struct {
	runs  []readRun
	parts [3]Extent // Off is the offset in the buffer
	size  int64     // buffer bytes needed
}

// planRead groups the parts of an expert into as few reads as mergeGap
// allows, aligned to align (1 for buffered reads).
func planRead(parts [3]Extent, align int64) readPlan {
	idx := []int{0, 1, 2}
	sort.Slice(idx, func(a, b int) bool { return parts[idx[a]].Off < parts[idx[b]].Off })
	var p readPlan
	var cur *readRun
	var curEnd int64
	for _, i := range idx {
		x := parts[i]
		if cur == nil || x.Off > curEnd+mergeGap {
			p.runs = append(p.runs, readRun{off: x.Off &^ (align - 1), bufOff: p.size})
			cur = &p.runs[len(p.runs)-1]
			curEnd = x.Off + x.Len
		} else {
			curEnd = max(curEnd, x.Off+x.Len)
		}
		cur.n = roundUp(curEnd, align) - cur.off
		p.parts[i] = Extent{Off: cur.bufOff + x.Off - cur.off, Len: x.Len}
		p.size = cur.bufOff + cur.n
	}
	return p
}

func roundUp(n, a int64) int64 { return (n + a - 1) / a * a }

// alignedBuf returns a zeroed n-byte slice whose first byte is aligned to
// directAlign.
func alignedBuf(n int64) []byte {
	b := make([]byte, n+directAlign)
	off := int64(uintptr(unsafe.Pointer(unsafe.SliceData(b))) & (directAlign - 1))
	if off != 0 {
		off = directAlign - off
	}
	return b[off : off+n : off+n]
}

// openModel opens path for expert reads, with O_DIRECT (or the platform's
// equivalent) when direct is set and the file system supports it. It
// reports whether direct I/O is really in use.
func openModel(path string, direct bool) (*os.File, bool, error) {
	if direct {
		f, err := openDirect(path)
		if err == nil {
			// Probe: some file systems accept the flag and then fail reads.
			buf := alignedBuf(directAlign)
			if _, rerr := f.ReadAt(buf, 0); rerr == nil || errors.Is(rerr, io.EOF) {
				return f, true, nil
			}
			f.Close()
		}
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, false, fmt.Errorf("expert: open model: %w", err)
	}
	return f, false, nil
}
