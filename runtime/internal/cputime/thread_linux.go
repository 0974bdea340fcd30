//go:build linux

package cputime

import (
	"time"

	"golang.org/x/sys/unix"
)

// Thread returns the CPU time consumed by the calling OS thread
// (CLOCK_THREAD_CPUTIME_ID, nanosecond resolution; the caller must hold
// runtime.LockOSThread), or 0 where the clock cannot be read.
func Thread() time.Duration {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_THREAD_CPUTIME_ID, &ts); err != nil {
		return 0
	}
	return time.Duration(ts.Nano())
}
