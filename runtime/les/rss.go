package les

import (
	"bufio"
	"os"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
)

// RSSMeter measures a peak RSS from a starting point. The zero value counts
// from no RSS and no mark.
type RSSMeter struct {
	base, before int64
}

// StartRSS returns freed heap to the OS, notes the current RSS and resets
// the kernel's peak RSS mark (Linux and Android; elsewhere peaks
// accumulate), so Peak sees only growth from here. base is the RSS Peak
// counts from; 0 means the current RSS.
func StartRSS(base int64) RSSMeter {
	FreeMemory()
	before := CurrentRSS()
	if base == 0 {
		base = before
	}
	resetPeakRSS()
	return RSSMeter{base: base, before: before}
}

// Peak returns base + max(0, the peak RSS since StartRSS − the RSS at
// StartRSS): the process's peak RSS when base is the RSS at the start.
func (m RSSMeter) Peak() int64 { return m.base + max(0, peakRSS()-m.before) }

// FreeMemory runs the garbage collector and returns freed heap to the OS,
// so the next RSS reading belongs to what comes next.
func FreeMemory() {
	runtime.GC()
	debug.FreeOSMemory()
}

// CurrentRSS returns the process's resident set (VmRSS) in bytes, 0 where
// unreadable.
func CurrentRSS() int64 { return procStatus("VmRSS:") }

func peakRSS() int64 { return procStatus("VmHWM:") }

func resetPeakRSS() { _ = os.WriteFile("/proc/self/clear_refs", []byte("5"), 0) }

func procStatus(field string) int64 {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), field); ok {
			kb, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			return kb << 10
		}
	}
	return 0
}
