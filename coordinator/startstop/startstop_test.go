package startstop

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"
)

func wait(t *testing.T, c <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-c:
	case <-time.After(10 * time.Second):
		t.Fatalf("%s: not within 10s", what)
	}
}

func TestServiceSemantics(t *testing.T) {
	t.Parallel()
	var s Service
	s.Stop() // no-op before Start
	var runs atomic.Int32
	loop := func(ctx context.Context) { runs.Add(1); <-ctx.Done() }
	started := s.Started() // handed out before Start: belongs to it
	if err := s.StartFunc(context.Background(), nil, loop); err != nil {
		t.Fatal(err)
	}
	wait(t, started, "started")
	if err := s.StartFunc(context.Background(), nil, loop); err != nil {
		t.Fatal(err)
	}
	select {
	case <-s.Stopped():
		t.Fatal("stopped while running")
	default:
	}
	stopped := s.Stopped()
	s.Stop()
	wait(t, stopped, "stopped")
	s.Stop() // idempotent
	if n := runs.Load(); n != 1 {
		t.Fatalf("%d loops ran, want 1 (a second Start while running does nothing)", n)
	}
	// Restart after Stop.
	if err := s.StartFunc(context.Background(), nil, loop); err != nil {
		t.Fatal(err)
	}
	wait(t, s.Started(), "restarted")
	s.Stop()
	if n := runs.Load(); n != 2 {
		t.Fatalf("%d loops ran, want 2", n)
	}
}

func TestServiceSetupErrorStartsNothing(t *testing.T) {
	t.Parallel()
	var s Service
	boom := errors.New("boom")
	ran := false
	err := s.StartFunc(context.Background(), func(context.Context) error { return boom }, func(context.Context) { ran = true })
	if !errors.Is(err, boom) || ran {
		t.Fatalf("StartFunc = %v, loop ran %v; want the setup error and no loop", err, ran)
	}
	s.Stop() // nothing to stop
}

func TestServiceParentContextEndsLoop(t *testing.T) {
	t.Parallel()
	var s Service
	ctx, cancel := context.WithCancel(context.Background())
	if err := s.StartFunc(ctx, nil, func(ctx context.Context) { <-ctx.Done() }); err != nil {
		t.Fatal(err)
	}
	cancel()
	wait(t, s.Stopped(), "stopped with its parent")
	s.Stop()
}
