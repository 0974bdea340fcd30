//go:build !linux

package cli

import (
	"syscall"
	"time"
)

// childAttr: only Linux can tie the child's life to ours.
func childAttr() *syscall.SysProcAttr { return nil }

// treeCPU: the database's CPU is read from /proc, which only Linux has.
func treeCPU(string) func() (time.Duration, bool) {
	return func() (time.Duration, bool) { return 0, false }
}
