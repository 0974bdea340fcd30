//go:build unix && !linux

package agent

import (
	"os"
	"os/exec"
	"runtime"
	"syscall"
)

// childProcAttr puts a runner child in its own process group.
func childProcAttr() *syscall.SysProcAttr { return &syscall.SysProcAttr{Setpgid: true} }

// exitWaiter waits for a child's exit; here await reaps it at once (there
// is no portable wait that leaves it unreaped), so the group is killed
// after its leader was collected.
type exitWaiter struct {
	cmd *exec.Cmd
	err error
}

func (w *exitWaiter) await()      { w.err = w.cmd.Wait() }
func (w *exitWaiter) reap() error { return w.err }

// maxRSS is the child's own peak resident memory from its rusage (bytes on
// Darwin, KiB elsewhere).
func maxRSS(st *os.ProcessState) int64 {
	if st == nil {
		return 0
	}
	ru, ok := st.SysUsage().(*syscall.Rusage)
	if !ok {
		return 0
	}
	if runtime.GOOS == "darwin" || runtime.GOOS == "ios" {
		return int64(ru.Maxrss)
	}
	return int64(ru.Maxrss) << 10
}

// groupMeter is Linux-only: elsewhere the group's memory is not polled and
// the RAM budget is not enforced while the child runs.
type groupMeter struct{}

func newGroupMeter(int) *groupMeter { return nil }

func (*groupMeter) rss() int64 { return 0 }
