//go:build !linux

package expert

import "time"

// preciseSleep sleeps for d.
func preciseSleep(d time.Duration) { time.Sleep(d) }

// pinWorker does nothing where timer slack cannot be set.
func pinWorker() {}
