//go:build !unix

package artifact

import "errors"

// freeSpace is unknown off Unix: uploads are then bounded by the size cap
// and by the write failing when the disk is full.
func freeSpace(string) (int64, error) {
	return 0, errors.New("artifact: free space unknown on this platform")
}
