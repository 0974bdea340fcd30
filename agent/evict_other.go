//go:build !linux

package agent

import (
	"errors"
	"runtime"
)

// evictModel cannot drop a file's pages here: posix_fadvise and mincore
// are used on Linux (and Android) only.
func evictModel(string) (pageCacheEviction, error) {
	return pageCacheEviction{}, errors.New("evicting a file from the page cache is not supported on " + runtime.GOOS)
}
