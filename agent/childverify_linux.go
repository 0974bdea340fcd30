package agent

import "syscall"

// stampOf reads path's fileStamp; ok is false when it cannot be read.
func stampOf(path string) (fileStamp, bool) {
	var st syscall.Stat_t
	if err := syscall.Stat(path, &st); err != nil {
		return fileStamp{}, false
	}
	return fileStamp{dev: uint64(st.Dev), ino: st.Ino, size: st.Size, //nolint:unconvert // Dev is uint32 on some GOARCHes
		mtime: st.Mtim.Nano(), ctime: st.Ctim.Nano()}, true
}
