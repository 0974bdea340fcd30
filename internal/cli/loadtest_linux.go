package cli

import (
	"bytes"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// childAttr makes the load test's coordinator die with the load test.
func childAttr() *syscall.SysProcAttr { return &syscall.SysProcAttr{Pdeathsig: syscall.SIGTERM} }

// treeCPU returns a function reading the CPU time (user + system) of the
// process whose pid is the first line of pidFile and of its children
// (PostgreSQL's postmaster and backends), from /proc; ok is false when it
// cannot be read. Exited children's time is lost, so a load window's
// figure undercounts by what backends that ended within it used.
func treeCPU(pidFile string) func() (time.Duration, bool) {
	return func() (time.Duration, bool) {
		b, err := os.ReadFile(pidFile)
		if err != nil {
			return 0, false
		}
		first, _, _ := strings.Cut(string(b), "\n")
		root, err := strconv.Atoi(strings.TrimSpace(first))
		if err != nil {
			return 0, false
		}
		ents, err := os.ReadDir("/proc")
		if err != nil {
			return 0, false
		}
		var ticks int64
		found := false
		for _, e := range ents {
			pid, err := strconv.Atoi(e.Name())
			if err != nil {
				continue
			}
			st, err := os.ReadFile("/proc/" + e.Name() + "/stat")
			if err != nil {
				continue
			}
			// Fields after the parenthesised command: state ppid ... utime(14) stime(15).
			i := bytes.LastIndexByte(st, ')')
			if i < 0 {
				continue
			}
			f := strings.Fields(string(st[i+1:]))
			if len(f) < 13 {
				continue
			}
			ppid, _ := strconv.Atoi(f[1])
			if pid != root && ppid != root {
				continue
			}
			u, _ := strconv.ParseInt(f[11], 10, 64)
			s, _ := strconv.ParseInt(f[12], 10, 64)
			ticks += u + s
			found = found || pid == root
		}
		// USER_HZ is 100 on Linux.
		return time.Duration(ticks) * 10 * time.Millisecond, found
	}
}
