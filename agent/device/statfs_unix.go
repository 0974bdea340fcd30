//go:build unix

package device

import "golang.org/x/sys/unix"

func freeStorage(path string) (int64, bool) {
	if path == "" {
		path = "."
	}
	var st unix.Statfs_t
	if err := unix.Statfs(path, &st); err != nil {
		return 0, false
	}
	return int64(st.Bavail) * int64(st.Bsize), true //nolint:unconvert // the field types differ across Unixes
}
