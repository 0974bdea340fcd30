//go:build linux

package expert

import (
	"os"

	"golang.org/x/sys/unix"
)

// openDirect opens path with O_DIRECT, bypassing the page cache.
func openDirect(path string) (*os.File, error) {
	return os.OpenFile(path, os.O_RDONLY|unix.O_DIRECT, 0)
}
