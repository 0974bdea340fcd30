//go:build linux

package cputime

import (
	"time"

	"golang.org/x/sys/unix"
)

// Process returns the CPU time consumed by all threads of the process
// (CLOCK_PROCESS_CPUTIME_ID, nanosecond resolution), or 0 where the clock
// cannot be read. Unlike wall time it does not grow while other processes
// hold the CPU.
func Process() time.Duration {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_PROCESS_CPUTIME_ID, &ts); err != nil {
		return 0
	}
	return time.Duration(ts.Nano())
}
