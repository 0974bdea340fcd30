//go:build !linux

package model

// adviseHuge does nothing where the OS has no madvise(MADV_HUGEPAGE).
func adviseHuge([]byte) {}
