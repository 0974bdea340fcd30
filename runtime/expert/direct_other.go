//go:build !linux && !darwin && !ios

package expert

import (
	"errors"
	"os"
)

// openDirect reports that direct I/O is unsupported on this platform; the
// store then falls back to buffered reads.
func openDirect(string) (*os.File, error) {
	return nil, errors.New("direct I/O unsupported on this platform")
}
