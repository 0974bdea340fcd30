package agent

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"strconv"
	"syscall"

	"golang.org/x/sys/unix"
)

// childProcAttr puts a runner child in its own process group, and kills it
// when the agent dies (Pdeathsig).
func childProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}

// exitWaiter waits for a child's exit in two steps: await returns once it
// exited and leaves it unreaped (a zombie), so that its pid, which is its
// process group's id, cannot be reused while the group is killed; reap
// then collects it.
type exitWaiter struct{ cmd *exec.Cmd }

func (w *exitWaiter) await() {
	var info unix.Siginfo
	for {
		err := unix.Waitid(unix.P_PID, w.cmd.Process.Pid, &info, unix.WEXITED|unix.WNOWAIT, nil)
		if !errors.Is(err, unix.EINTR) {
			return
		}
	}
}

func (w *exitWaiter) reap() error { return w.cmd.Wait() }

// maxRSS is the child's own peak resident memory from its rusage (Linux
// reports KiB).
func maxRSS(st *os.ProcessState) int64 {
	if st == nil {
		return 0
	}
	if ru, ok := st.SysUsage().(*syscall.Rusage); ok {
		return ru.Maxrss << 10
	}
	return 0
}

// groupMeter sums the resident memory of a process group's processes from
// /proc. It reads the stat file of the members it knows at every sample,
// and rescans /proc for new members every rssScanEvery samples (a full
// scan reads one file per process of the device, too many to read ten
// times a second while a benchmark runs).
type groupMeter struct {
	pgid    int
	members map[int]bool
	samples int
	page    int64
	buf     []byte
}

func newGroupMeter(pgid int) *groupMeter {
	return &groupMeter{pgid: pgid, members: map[int]bool{pgid: true}, page: int64(os.Getpagesize()), buf: make([]byte, 1024)}
}

// rss returns the group's resident bytes now.
func (m *groupMeter) rss() int64 {
	if m.samples%rssScanEvery == 0 {
		m.scan()
	}
	m.samples++
	var sum int64
	for pid := range m.members {
		pgrp, rss, ok := m.stat(pid)
		if !ok || pgrp != m.pgid {
			delete(m.members, pid)
			continue
		}
		sum += rss
	}
	return sum
}

// scan adds every process of /proc in the group to the members.
func (m *groupMeter) scan() {
	d, err := os.Open("/proc")
	if err != nil {
		return
	}
	names, _ := d.Readdirnames(-1)
	d.Close()
	for _, n := range names {
		pid, err := strconv.Atoi(n)
		if err != nil || m.members[pid] {
			continue
		}
		if pgrp, _, ok := m.stat(pid); ok && pgrp == m.pgid {
			m.members[pid] = true
		}
	}
}

// stat reads the process group and resident bytes of pid from
// /proc/PID/stat (fields 5 and 24, counted after the command name, which
// may hold spaces and parentheses).
func (m *groupMeter) stat(pid int) (pgrp int, rss int64, ok bool) {
	f, err := os.Open("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, 0, false
	}
	n, _ := f.Read(m.buf)
	f.Close()
	b := m.buf[:n]
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, 0, false
	}
	fields := bytes.Fields(b[i+1:]) // state, ppid, pgrp, ... rss is the 22nd
	if len(fields) < 22 {
		return 0, 0, false
	}
	g, err1 := strconv.Atoi(string(fields[2]))
	r, err2 := strconv.ParseInt(string(fields[21]), 10, 64)
	if err1 != nil || err2 != nil {
		return 0, 0, false
	}
	return g, r * m.page, true
}
