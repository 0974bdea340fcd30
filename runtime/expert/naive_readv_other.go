//go:build !linux

package expert

import (
	"io"
	"os"
)

// canReadv says preadPages is not available here: naive reads into its
// window and copies.
const canReadv = false

func preadPages(f *os.File, bufs [][]byte, off int64, iov *[]iovec) (int, error) { return 0, io.EOF }

type iovec struct{}

func isAligned(b []byte) bool { return false }
