package agent

import (
	"errors"
	"sync"

	"github.com/lesfarm/lesfarm/agent/artifact"
	"github.com/lesfarm/lesfarm/protocol"
)

// storageShort tracks whether the agent is short of storage (issue 29,
// finding 10). A hello reports the room for artifacts once; a disk that
// fills afterwards made the device refuse, or fail, every run of the model
// within seconds while the coordinator still believed the hello. So once
// the agent refuses an assignment for lack of room (or a download fills
// its disk), it reports its room in
// every heartbeat (protocol.Heartbeat.FreeStorageBytes) until a heartbeat
// has reported enough room for the largest model it refused: until then
// the coordinator sees it unfit for such models, and the run goes
// elsewhere. The zero value is not short; it is safe for concurrent use.
type storageShort struct {
	mu sync.Mutex
	// need is the size of the largest model refused for lack of room
	// since the room was last reported back; 0 when not short.
	need int64
	// kick, when set, is signalled (without blocking) on a new shortage,
	// so that a heartbeat reports it at once.
	kick chan struct{}
}

// noteRefusal records the refusal of asg when the cache cannot hold its
// model, and asks for a heartbeat at once.
func (s *storageShort) noteRefusal(c *artifact.Cache, asg *protocol.Assignment) {
	spec := artifact.Spec{URL: asg.Artifact.URL, SHA256: asg.Artifact.SHA256, Size: asg.Artifact.Size}
	if err := c.CanHold(spec); errors.Is(err, artifact.ErrNoSpace) {
		s.note(spec.Size)
	}
}

// note records that a model of size bytes did not fit (a refusal, or a
// download that filled the disk), and asks for a heartbeat at once.
func (s *storageShort) note(size int64) {
	s.mu.Lock()
	s.need = max(s.need, size, 1)
	s.mu.Unlock()
	select {
	case s.kick <- struct{}{}:
	default:
	}
}

// report returns the room to put in a heartbeat: the cache's room while
// short, nil otherwise.
func (s *storageShort) report(c *artifact.Cache) *int64 {
	s.mu.Lock()
	short := s.need > 0
	s.mu.Unlock()
	if !short {
		return nil
	}
	room, ok := c.Room()
	if !ok {
		return nil
	}
	return &room
}

// reported records that a heartbeat carrying room was answered: the
// shortage is over once room holds every model refused meanwhile.
func (s *storageShort) reported(room *int64) {
	if room == nil {
		return
	}
	s.mu.Lock()
	if *room >= s.need {
		s.need = 0
	}
	s.mu.Unlock()
}
