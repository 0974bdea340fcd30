package coordinator

import (
	"sync"
	"time"
)

// unfitTTL is how long a device that refused a run as unable to run it
// (unsupported model, not enough RAM) is not offered that run again. The
// refusal may stop being true (agent upgraded, memory freed), so it expires.
const unfitTTL = 10 * time.Minute

// maxUnfit bounds the remembered refusals.
const maxUnfit = 1 << 16

type unfitKey struct {
	run    int64
	device string
}

// unfitSet remembers (run, device) pairs whose device refused the run as
// "not this device", so placement offers the run to other devices. It is
// per coordinator and in memory: another coordinator, or this one after a
// restart, may offer the run to the device once more, which costs one
// refused assignment (no download, no attempt). The zero value is ready
// to use and safe for concurrent use.
type unfitSet struct {
	mu sync.Mutex
	m  map[unfitKey]time.Time // expiry
}

func (u *unfitSet) add(run int64, device string, now time.Time) {
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.m == nil {
		u.m = map[unfitKey]time.Time{}
	}
	if len(u.m) >= maxUnfit {
		for k, exp := range u.m {
			if now.After(exp) {
				delete(u.m, k)
			}
		}
		if len(u.m) >= maxUnfit {
			clear(u.m)
		}
	}
	u.m[unfitKey{run, device}] = now.Add(unfitTTL)
}

func (u *unfitSet) has(run int64, device string, now time.Time) bool {
	u.mu.Lock()
	defer u.mu.Unlock()
	exp, ok := u.m[unfitKey{run, device}]
	if ok && now.After(exp) {
		delete(u.m, unfitKey{run, device})
		return false
	}
	return ok
}
