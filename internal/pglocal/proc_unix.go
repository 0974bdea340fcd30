//go:build unix

package pglocal

import (
	"bytes"
	"context"
	"errors"
	"io/fs"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

func lookupUser(name string) (*credential, error) {
	u, err := user.Lookup(name)
	if err != nil {
		return nil, err
	}
	uid, err := strconv.Atoi(u.Uid)
	if err != nil {
		return nil, err
	}
	gid, err := strconv.Atoi(u.Gid)
	if err != nil {
		return nil, err
	}
	return &credential{uid: uid, gid: gid}, nil
}

func ownedBy(fi fs.FileInfo, cred *credential) bool {
	st, ok := fi.Sys().(*syscall.Stat_t)
	return ok && int(st.Uid) == cred.uid
}

func sysProcAttr(cred *credential, server bool) *syscall.SysProcAttr {
	a := &syscall.SysProcAttr{Setpgid: true}
	if cred != nil {
		a.Credential = &syscall.Credential{Uid: uint32(cred.uid), Gid: uint32(cred.gid)}
	}
	if server {
		setParentDeathSignal(a)
	}
	return a
}

// SignalGroup sends sig to the server's processes: the postmaster and
// each of its children (backends call setsid, so they are not in its
// process group; children are found in /proc where it exists), e.g.
// SIGSTOP and SIGCONT to freeze and thaw the database in fault tests. A
// shared server is not signalled.
func (s *Server) SignalGroup(sig syscall.Signal) error {
	p := s.current()
	if s.shared || p == nil {
		return errors.New("pglocal: server not started by this process")
	}
	pid := p.cmd.Process.Pid
	if err := syscall.Kill(pid, sig); err != nil {
		return err
	}
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		child, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		// pid (comm) state ppid ...: comm may hold spaces, so split after ')'.
		i := strings.LastIndexByte(string(b), ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(string(b[i+1:]))
		if len(f) > 1 && f[1] == strconv.Itoa(pid) {
			_ = syscall.Kill(child, sig)
		}
	}
	return nil
}

// killOrphans kills the processes left behind by a postmaster that died
// without shutting down: its backends and auxiliary processes, which run
// in dataDir (PostgreSQL changes into its data directory), outlive it for a
// moment and hold its shared memory, so a new postmaster started before
// they are gone refuses with "pre-existing shared memory block is still in
// use". It waits until none is left or ctx ends, and returns how many it
// killed. Without /proc (not Linux) it finds none.
func killOrphans(ctx context.Context, dataDir string) int {
	dir, err := filepath.EvalSymlinks(dataDir)
	if err != nil {
		return 0
	}
	dir, _ = filepath.Abs(dir)
	killed := 0
	for {
		left := 0
		ents, _ := os.ReadDir("/proc")
		for _, e := range ents {
			pid, err := strconv.Atoi(e.Name())
			if err != nil || pid == os.Getpid() {
				continue
			}
			if cwd, err := os.Readlink("/proc/" + e.Name() + "/cwd"); err != nil || cwd != dir {
				continue
			}
			if b, err := os.ReadFile("/proc/" + e.Name() + "/stat"); err == nil && zombie(b) {
				continue
			}
			left++
			if syscall.Kill(pid, syscall.SIGKILL) == nil {
				killed++
			}
		}
		if left == 0 {
			return killed
		}
		select {
		case <-ctx.Done():
			return killed
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// zombie says whether a /proc/PID/stat line is a process that exited and
// waits to be reaped (state Z), which holds no memory.
func zombie(stat []byte) bool {
	i := bytes.LastIndexByte(stat, ')')
	return i >= 0 && i+2 < len(stat) && stat[i+2] == 'Z'
}
