//go:build linux

package expert

import (
	"fmt"
	"os"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// DeviceReadAhead returns the read-ahead the kernel uses for files on the
// block device holding path (its queue's read_ahead_kb, in bytes, at most
// 64 MiB), and whether it could be read: what a mapped file's faults read
// there, which the naive mode reads on direct storage and profile measure
// records.
func DeviceReadAhead(path string) (int64, bool) {
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		return 0, false
	}
	base := fmt.Sprintf("/sys/dev/block/%d:%d", unix.Major(st.Dev), unix.Minor(st.Dev))
	// A partition has no queue of its own: its disk's is one level up.
	for _, p := range []string{base + "/queue/read_ahead_kb", base + "/../queue/read_ahead_kb"} {
		b, err := os.ReadFile(p)
		if err != nil {
			continue
		}
		kb, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
		if err != nil || kb < 0 {
			return 0, false
		}
		return min(kb<<10, MaxReadAhead), true
	}
	return 0, false
}
