package agent

import (
	"fmt"
	"math"
	"os"
	"unsafe"

	"golang.org/x/sys/unix"
)

// evictModel drops path's pages from the page cache, as a runner does
// before each config when its job asks (RunnerJob.EvictModel), so that
// the config reads the model from flash: it flushes the file's dirty
// pages (posix_fadvise skips them), then posix_fadvise(POSIX_FADV_DONTNEED)
// over the whole file. No root is needed. It measures the share of pages
// resident before and after with mincore on a mapping that is never
// touched, so measuring faults nothing in. Pages another process has
// mapped stay cached; so do a tmpfs file's.
func evictModel(path string) (pageCacheEviction, error) {
	f, err := os.Open(path)
	if err != nil {
		return pageCacheEviction{}, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return pageCacheEviction{}, err
	}
	fd := int(f.Fd())
	var e pageCacheEviction
	before, err1 := residency(fd, st.Size())
	_ = unix.Fdatasync(fd) // best effort: a read-only file system has nothing dirty
	if err := unix.Fadvise(fd, 0, 0, unix.FADV_DONTNEED); err != nil {
		return e, fmt.Errorf("posix_fadvise DONTNEED %s: %w", path, err)
	}
	after, err2 := residency(fd, st.Size())
	if err1 == nil && err2 == nil {
		e.before, e.after, e.measured = before, after, true
	}
	return e, nil
}

// residency is the share of the first size bytes of fd's pages that are in
// the page cache (mincore over a read-only shared mapping).
func residency(fd int, size int64) (float64, error) {
	if size <= 0 || size > math.MaxInt {
		return 0, fmt.Errorf("size %d cannot be mapped", size)
	}
	b, err := unix.Mmap(fd, 0, int(size), unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		return 0, err
	}
	defer func() { _ = unix.Munmap(b) }()
	page := os.Getpagesize()
	vec := make([]byte, (int(size)+page-1)/page)
	// x/sys/unix has no mincore wrapper for Linux.
	if _, _, errno := unix.Syscall(unix.SYS_MINCORE, uintptr(unsafe.Pointer(&b[0])), uintptr(len(b)), uintptr(unsafe.Pointer(&vec[0]))); errno != 0 {
		return 0, fmt.Errorf("mincore: %w", errno)
	}
	n := 0
	for _, v := range vec {
		n += int(v & 1)
	}
	return float64(n) / float64(len(vec)), nil
}
