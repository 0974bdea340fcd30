//go:build unix

package pglocal

import (
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
