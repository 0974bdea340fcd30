//go:build !linux

package expert

// DeviceReadAhead reports that the platform's read-ahead is unknown here.
func DeviceReadAhead(path string) (int64, bool) { return 0, false }
