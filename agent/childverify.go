package agent

import (
	"fmt"
	"os"
	"sync"
	"time"
)

// execSettle is how long before a hash starts an executable's inode must
// have last changed for the hash to be remembered by its stamp: a write
// in the same tick of the kernel's coarse clock as the one before the
// hash could otherwise leave the stamp unchanged.
const execSettle = 2 * time.Second

// fileStamp is what the kernel says about a file that any change to its
// bytes changes: device, inode, size, and the modification and status
// change times. The status change time cannot be set by a process, so a
// file rewritten and given its old mtime back still gets a new stamp.
type fileStamp struct {
	dev, ino     uint64
	size         int64
	mtime, ctime int64 // Unix nanoseconds
}

// verifiedExecs checks a build's executable against its sha256 before each
// exec, hashing it only when it may have changed since it was last found
// good: the file's stamp (fileStamp) is remembered with the sha256 it
// matched, and a file whose stamp is the same is the same file. Hashing
// the 57 MB lesfarm executable before every run cost about 56 ms of CPU,
// as much as starting the child itself (docs/agent.md). Where no stamp
// can be read (stampOf is Linux only) every check hashes. The zero value
// is ready; it is safe for concurrent use.
type verifiedExecs struct {
	mu   sync.Mutex
	good map[string]verifiedExec // by path
	// hashes counts the files hashed (tests read it).
	hashes int
	// now is the clock the settle rule reads; nil means time.Now.
	now func() time.Time
}

type verifiedExec struct {
	sha256 string
	stamp  fileStamp
}

// check returns the sha256 of the executable at path: want when the file
// is unchanged since it last hashed to want, else a fresh hash. The error
// says why the file could not be read.
func (v *verifiedExecs) check(path, want string) (string, error) {
	now := v.now
	if now == nil {
		now = time.Now
	}
	st0, stamped := stampOf(path)
	v.mu.Lock()
	known, ok := v.good[path]
	v.mu.Unlock()
	if stamped && ok && known.sha256 == want && known.stamp == st0 {
		return want, nil
	}
	start := now()
	got, err := fileSHA256(path)
	v.mu.Lock()
	defer v.mu.Unlock()
	v.hashes++
	delete(v.good, path)
	if err != nil {
		return "", err
	}
	// Remember it only when nothing changed while it was hashed and its
	// last change is old enough that a later one gets another stamp.
	if st1, ok := stampOf(path); ok && stamped && got == want && st1 == st0 &&
		max(st0.ctime, st0.mtime) < start.Add(-execSettle).UnixNano() {
		if v.good == nil {
			v.good = make(map[string]verifiedExec)
		}
		v.good[path] = verifiedExec{sha256: got, stamp: st0}
	}
	return got, nil
}

// makeExecutable sets path's mode to 0755 unless it is that already: a
// chmod changes the file's status change time even when the mode stays,
// and would make every check hash again.
func makeExecutable(path string) error {
	fi, err := os.Stat(path)
	if err != nil {
		return err
	}
	if fi.Mode().Perm() == 0o755 {
		return nil
	}
	if err := os.Chmod(path, 0o755); err != nil {
		return fmt.Errorf("making %s executable: %w", path, err)
	}
	return nil
}
