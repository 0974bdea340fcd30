// Package startstop gives the coordinator's background services one
// start/stop semantics (after river's internal/maintenance/startstop):
//
//   - Start(ctx) error starts the service's loop in a goroutine and
//     returns at once. A Start while the loop runs does nothing and
//     returns nil. A setup error is returned and nothing runs.
//   - Started() is closed once the loop runs; tests wait on it instead of
//     sleeping.
//   - Stop() cancels the loop's context and waits for it to return. It is
//     idempotent, and a no-op on a service never started. After Stop the
//     service may be started again.
//   - Stopped() is closed when the loop has returned (on Stop, or when the
//     loop ends on its own or its parent context ends).
//
// A service embeds a Service and calls StartFunc from its Start method.
package startstop

import (
	"context"
	"sync"
)

// Service is the start/stop state of one background loop. The zero value
// is a stopped service. It is safe for concurrent use.
type Service struct {
	mu      sync.Mutex
	cancel  context.CancelFunc
	started chan struct{}
	stopped chan struct{}
}

// StartFunc runs setup (if not nil) and then loop in a goroutine, under a
// context derived from ctx that Stop cancels. It returns setup's error, or
// nil; when the loop already runs it does nothing and returns nil.
func (s *Service) StartFunc(ctx context.Context, setup func(ctx context.Context) error, loop func(ctx context.Context)) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cancel != nil {
		select {
		case <-s.stopped:
			// The loop ended on its own: start it again.
		default:
			return nil
		}
	}
	if setup != nil {
		if err := setup(ctx); err != nil {
			return err
		}
	}
	ctx, cancel := context.WithCancel(ctx)
	// Channels handed out before this Start (Started, Stopped) belong to
	// it; a previous run's are closed and replaced.
	if s.started == nil || closed(s.started) {
		s.started = make(chan struct{})
	}
	if s.stopped == nil || closed(s.stopped) {
		s.stopped = make(chan struct{})
	}
	s.cancel = cancel
	started, stopped := s.started, s.stopped
	go func() {
		defer close(stopped)
		defer cancel()
		close(started)
		loop(ctx)
	}()
	return nil
}

// Started returns a channel closed once the loop runs (the channel of the
// latest Start; one that is never closed before any Start).
func (s *Service) Started() <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.started == nil {
		s.started = make(chan struct{})
	}
	return s.started
}

// Stopped returns a channel closed once the loop has returned (the
// latest Start's; one that is never closed before any Start).
func (s *Service) Stopped() <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stopped == nil {
		s.stopped = make(chan struct{})
	}
	return s.stopped
}

// Stop cancels the loop and waits for it to return. It is safe to call
// more than once and without Start.
func (s *Service) Stop() {
	s.mu.Lock()
	cancel, stopped := s.cancel, s.stopped
	s.cancel = nil
	s.mu.Unlock()
	if cancel == nil {
		return
	}
	cancel()
	<-stopped
}

func closed(c chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}
