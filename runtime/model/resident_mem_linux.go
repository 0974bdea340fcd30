package model

import "syscall"

// adviseHuge asks the kernel for transparent huge pages under b (b starts
// on a hugePage boundary). An error (THP disabled, an old kernel) only
// leaves b on base pages, so it is ignored.
func adviseHuge(b []byte) {
	if n := len(b) &^ (hugePage - 1); n > 0 {
		_ = syscall.Madvise(b[:n], syscall.MADV_HUGEPAGE)
	}
}
