//go:build !unix

package agent

import (
	"os"
	"os/exec"
	"syscall"
)

// Without Unix process groups a runner child cannot be supervised as
// RunChild promises; the agent runs the embedded runtime there.

func childProcAttr() *syscall.SysProcAttr { return nil }

type exitWaiter struct {
	cmd *exec.Cmd
	err error
}

func (w *exitWaiter) await()      { w.err = w.cmd.Wait() }
func (w *exitWaiter) reap() error { return w.err }

func killGroup(pgid int) {
	if p, err := os.FindProcess(pgid); err == nil {
		_ = p.Kill()
	}
}

func maxRSS(*os.ProcessState) int64 { return 0 }

type groupMeter struct{}

func newGroupMeter(int) *groupMeter { return nil }

func (*groupMeter) rss() int64 { return 0 }
