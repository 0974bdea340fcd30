//go:build !linux

package les

import "errors"

// Pin is not supported off Linux: it returns an error.
func Pin(cpu int) (unpin func(), err error) {
	return nil, errors.New("les: pinning threads needs Linux (sched_setaffinity)")
}

// PinnedCPU returns -1 off Linux.
func PinnedCPU() int { return -1 }

// DefaultPinCPU returns -1 off Linux.
func DefaultPinCPU() int { return -1 }
