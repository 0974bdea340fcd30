package coordinator

import (
	"testing"
	"time"
)

func TestUnfitSet(t *testing.T) {
	t.Parallel()
	var u unfitSet
	now := time.Now()
	if u.has(1, "a", now) {
		t.Fatal("empty set has an entry")
	}
	u.add(1, "a", now)
	if !u.has(1, "a", now) || u.has(1, "b", now) || u.has(2, "a", now) {
		t.Fatal("wrong membership")
	}
	if !u.has(1, "a", now.Add(unfitTTL-time.Second)) || u.has(1, "a", now.Add(unfitTTL+time.Second)) {
		t.Fatal("entry does not expire after unfitTTL")
	}
	for i := range maxUnfit + 10 {
		u.add(int64(i), "x", now)
	}
	if len(u.m) > maxUnfit {
		t.Fatalf("set grew to %d entries, bound %d", len(u.m), maxUnfit)
	}
}
