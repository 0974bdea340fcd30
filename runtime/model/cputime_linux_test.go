//go:build linux

package model

import (
	"time"

	"golang.org/x/sys/unix"
)

// threadCPU returns the CPU time consumed by the calling OS thread
// (CLOCK_THREAD_CPUTIME_ID, nanosecond resolution; the caller must hold
// runtime.LockOSThread). On a shared, noisy machine it
// measures model speed better than wall time.
func threadCPU() time.Duration {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_THREAD_CPUTIME_ID, &ts); err != nil {
		return 0
	}
	return time.Duration(ts.Nano())
}
