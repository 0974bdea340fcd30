package cli

import "syscall"

// childAttr makes the load test's coordinator die with the load test.
func childAttr() *syscall.SysProcAttr { return &syscall.SysProcAttr{Pdeathsig: syscall.SIGTERM} }
