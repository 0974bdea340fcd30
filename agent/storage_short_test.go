package agent

import (
	"testing"

	"github.com/lesfarm/lesfarm/agent/artifact"
)

// TestStorageShortReportsUntilRoomIsBack: an agent not short of storage
// puts no room in its heartbeats; once a model did not fit (a refusal, or
// a download that filled the disk) it reports its room, asks for a
// heartbeat at once, and keeps reporting until an answered heartbeat
// carried room for the largest model that did not fit.
func TestStorageShortReportsUntilRoomIsBack(t *testing.T) {
	t.Parallel()
	c, err := artifact.New(artifact.Config{Dir: t.TempDir(), MaxBytes: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	s := storageShort{kick: make(chan struct{}, 1)}
	if r := s.report(c); r != nil {
		t.Fatalf("not short, yet reports %d", *r)
	}
	s.note(4 << 20) // larger than the cache's 1 MiB cap
	select {
	case <-s.kick:
	default:
		t.Fatal("a shortage did not ask for a heartbeat")
	}
	for _, tc := range []struct {
		answered int64
		short    bool
	}{
		{1 << 20, true},  // the cap's room: still short of the 4 MiB model
		{4 << 20, false}, // room for it: the shortage is over
	} {
		r := s.report(c)
		if r == nil || *r > 1<<20 {
			t.Fatalf("short of storage, reports %v; want the cache's room (at most its 1 MiB cap)", r)
		}
		s.reported(&tc.answered)
		if got := s.report(c) != nil; got != tc.short {
			t.Fatalf("after a heartbeat answered with %d bytes: short %v, want %v", tc.answered, got, tc.short)
		}
	}
}
