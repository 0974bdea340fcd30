//go:build !linux

package cputime

import "time"

// Process returns 0: this platform has no process CPU clock here, so
// callers fall back to wall time.
func Process() time.Duration { return 0 }
