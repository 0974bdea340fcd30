//go:build !linux

package cli

import "syscall"

// childAttr: only Linux can tie the child's life to ours.
func childAttr() *syscall.SysProcAttr { return nil }
