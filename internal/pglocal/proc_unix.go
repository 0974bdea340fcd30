//go:build unix

package pglocal

import (
	"errors"
	"io/fs"
	"os/user"
	"strconv"
	"syscall"
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

// SignalGroup sends sig to the server's whole process group (the
// postmaster and every backend), e.g. SIGSTOP and SIGCONT to freeze and
// thaw the database in fault tests. A shared server is not signalled.
func (s *Server) SignalGroup(sig syscall.Signal) error {
	if s.shared || s.cmd == nil || s.cmd.Process == nil {
		return errors.New("pglocal: server not started by this process")
	}
	return syscall.Kill(-s.cmd.Process.Pid, sig)
}
