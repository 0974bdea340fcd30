//go:build unix

package agent

import "syscall"

// killGroup sends SIGKILL to every process of the process group pgid (a
// group that is gone already is no error).
func killGroup(pgid int) {
	_ = syscall.Kill(-pgid, syscall.SIGKILL)
}
