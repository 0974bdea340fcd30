//go:build linux

package expert

import (
	"runtime"
	"time"

	"golang.org/x/sys/unix"
)

// preciseSleep blocks the calling thread in nanosleep for d.
func preciseSleep(d time.Duration) {
	ts := unix.NsecToTimespec(int64(d))
	for unix.Nanosleep(&ts, &ts) == unix.EINTR {
	}
}

// pinWorker locks the worker goroutine to its thread and lowers the
// thread's timer slack to 1 µs, so emulated latencies are honoured to a few
// microseconds.
func pinWorker() {
	runtime.LockOSThread()
	_ = unix.Prctl(unix.PR_SET_TIMERSLACK, 1000, 0, 0, 0)
}
