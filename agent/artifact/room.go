package artifact

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
)

// ErrNoSpace is wrapped by the error of a Get whose artifact the device's
// disk cannot hold: not enough free space even after evicting every
// unpinned object, or the disk filled up during the download (whose
// partial file is then removed). It is the device's condition, not the
// build's (issue 29, finding 10).
var ErrNoSpace = errors.New("artifact: not enough storage on this device")

// Room returns the largest artifact the cache could take now: the free
// space of its file system plus the cached objects no handle pins (which
// it would evict), at most the cap less what is pinned and the partial
// downloads. ok is false when the free space cannot be read.
func (c *Cache) Room() (room int64, ok bool) {
	free, ok := freeSpace(c.cfg.Dir)
	if !ok {
		return 0, false
	}
	evictable, capRoom := c.usage()
	return max(min(free+evictable, capRoom), 0), true
}

// usage returns the bytes of unpinned cached objects, and what the cap
// leaves for a new artifact: the cap less pinned objects and partial
// downloads.
func (c *Cache) usage() (evictable, capRoom int64) {
	c.mu.Lock()
	var pinned int64
	for sha, e := range c.index {
		if c.pins[sha] > 0 {
			pinned += e.Size
		} else {
			evictable += e.Size
		}
	}
	c.mu.Unlock()
	var partial int64
	parts, _ := os.ReadDir(filepath.Join(c.cfg.Dir, "partial"))
	for _, de := range parts {
		if info, err := de.Info(); err == nil {
			partial += info.Size()
		}
	}
	return evictable, c.cfg.MaxBytes - pinned - partial
}

// CanHold returns nil when spec's artifact is cached or would fit (Room),
// else an error wrapping ErrNoSpace that says how much is missing. The
// agent asks before accepting an assignment, so a device that cannot hold
// the model refuses it (another device runs it) instead of failing it.
func (c *Cache) CanHold(spec Spec) error {
	if spec.URL == "" || c.Has(spec.SHA256) {
		return nil
	}
	// The artifact's own partial download counts toward it, not against.
	have := int64(0)
	if info, err := os.Stat(c.partialPath(spec.SHA256)); err == nil {
		have = info.Size()
	}
	if _, capRoom := c.usage(); spec.Size > capRoom+have {
		return fmt.Errorf("%w: %w: the model needs %d bytes, the cap leaves %d beside pinned files", ErrNoSpace, ErrTooLarge, spec.Size, capRoom+have)
	}
	room, ok := c.Room()
	if !ok || spec.Size <= room+have {
		return nil
	}
	return fmt.Errorf("%w: the model needs %d bytes, the disk and the artifact cache can make room for %d", ErrNoSpace, spec.Size, room+have)
}
