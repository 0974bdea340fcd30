//go:build unix

package artifact

import "golang.org/x/sys/unix"

// freeSpace returns the bytes available to unprivileged writers in the file
// system of path, and whether it could tell.
func freeSpace(path string) (int64, bool) {
	if path == "" {
		path = "."
	}
	var st unix.Statfs_t
	if err := unix.Statfs(path, &st); err != nil {
		return 0, false
	}
	return int64(st.Bavail) * int64(st.Bsize), true //nolint:unconvert // the field types differ across Unixes
}
