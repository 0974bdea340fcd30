//go:build !linux

package cputime

import "time"

// Thread returns 0: this platform has no per-thread CPU clock here, so
// callers fall back to wall time.
func Thread() time.Duration { return 0 }
