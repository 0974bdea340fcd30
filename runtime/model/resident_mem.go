package model

import (
	"fmt"
	"unsafe"

	"github.com/lesfarm/lesfarm/runtime/gguf"
)

// hugePage is the transparent huge page size residentBytes aligns to
// (2 MiB on amd64 and arm64 Linux with 4 KiB base pages).
const hugePage = 2 << 20

// residentBytes returns a zeroed n-byte slice for weights that stay in RAM
// for the model's life, with its pages already faulted in. Slices of at
// least 4 MiB start on a hugePage boundary and are advised as huge pages
// where the OS supports it (Linux: madvise MADV_HUGEPAGE, which the
// default transparent_hugepage=madvise setting honours). Both are for
// speed only and change no byte:
//   - A page the kernel first faults in on a read(2) into it paid, on the
//     measured VM, about 7 µs of CPU again on the first user access, so a
//     resident model read with pread decoded at a fifth of its speed until
//     every expert had been used once (issue 31). Writing each page once
//     before the read faults it in from user space, which does not.
//   - Random experts of 1.8 MB on 4 KiB pages cost a page walk every 4 KiB;
//     on 2 MiB pages an expert spans one or two.
func residentBytes(n int64) []byte {
	if n < 4<<20 {
		return prefault(make([]byte, n))
	}
	buf := make([]byte, n+hugePage)
	off := int64(0)
	if r := int64(uintptr(unsafe.Pointer(&buf[0])) % hugePage); r != 0 {
		off = hugePage - r
	}
	b := buf[off : off+n : off+n]
	adviseHuge(b)
	return prefault(b)
}

// prefault writes one zero byte per 4 KiB page of b (b is zeroed already),
// so every page is faulted in by a user write before a read(2) fills it.
func prefault(b []byte) []byte {
	for i := 0; i < len(b); i += 4096 {
		b[i] = 0
	}
	return b
}

// readResident reads the whole data of tensor t into residentBytes.
func readResident(f *gguf.File, t *gguf.TensorInfo) ([]byte, error) {
	buf := residentBytes(t.Size)
	if n, err := f.ReaderAt().ReadAt(buf, f.TensorOffset(t)); n < len(buf) {
		return nil, fmt.Errorf("gguf: reading tensor %q: %w", t.Name, err)
	}
	return buf, nil
}
