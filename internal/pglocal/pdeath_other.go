//go:build unix && !linux

package pglocal

import "syscall"

func setParentDeathSignal(*syscall.SysProcAttr) {}
