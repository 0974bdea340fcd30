//go:build !linux

package calibrate

func memTotal() int64 { return 0 }
