package pglocal

import "syscall"

// setParentDeathSignal makes the kernel send postgres SIGINT (fast
// shutdown) when this process dies, so a crashed coordinator or test binary
// does not leave a server behind.
func setParentDeathSignal(a *syscall.SysProcAttr) { a.Pdeathsig = syscall.SIGINT }
