package pglocal

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"
)

// SuperviseConfig configures Server.Supervise. The zero value picks every
// default.
type SuperviseConfig struct {
	// MinBackoff and MaxBackoff bound the wait before each restart; it
	// doubles with each consecutive failure (defaults 250ms and 10s).
	MinBackoff, MaxBackoff time.Duration
	// MaxFailures is how many consecutive failures supervision tolerates
	// before it gives up (default 5). A failure is a postmaster that died
	// within StableAfter of its start, or a restart that did not come up.
	MaxFailures int
	// StableAfter is how long a postmaster must run for its death to count
	// as a first failure again (default 1m).
	StableAfter time.Duration
	// Logger receives restarts and the final failure (default the
	// server's).
	Logger *slog.Logger
}

// orphanWait bounds the wait for a dead postmaster's leftover processes to
// go before a restart.
const orphanWait = 10 * time.Second

// Supervise restarts the postmaster, with exponential backoff, whenever it
// exits without Stop (killed, crashed, OOM). PostgreSQL's own crash
// recovery replays the WAL, so committed data survives. After
// MaxFailures consecutive failures it gives up: the returned channel
// receives the last error and is closed. The channel is also closed,
// with nothing sent, once Stop is called or ctx ends. Supervise is a no-op
// (a channel that only closes with ctx) on a server another process
// started.
func (s *Server) Supervise(ctx context.Context, cfg SuperviseConfig) <-chan error {
	cfg.MinBackoff = cmp.Or(cfg.MinBackoff, 250*time.Millisecond)
	cfg.MaxBackoff = cmp.Or(cfg.MaxBackoff, 10*time.Second)
	cfg.MaxFailures = cmp.Or(cfg.MaxFailures, 5)
	cfg.StableAfter = cmp.Or(cfg.StableAfter, time.Minute)
	log := cmp.Or(cfg.Logger, s.cfg.Logger)
	out := make(chan error, 1)
	go func() {
		defer close(out)
		if s.shared {
			<-ctx.Done()
			return
		}
		failures := 0
		for {
			p := s.current()
			startedAt := time.Now()
			select {
			case <-ctx.Done():
				return
			case <-p.done:
			}
			if s.isStopping() {
				return
			}
			if time.Since(startedAt) >= cfg.StableAfter {
				failures = 0
			}
			failures++
			log.WarnContext(ctx, "pglocal: postgres exited unexpectedly, restarting", "err", p.waitErr, "failures", failures, "log", s.logTail())
			// The dead postmaster's backends still hold its shared memory
			// for a moment; a new one started before they are gone fails.
			kctx, cancel := context.WithTimeout(ctx, orphanWait)
			if n := killOrphans(kctx, s.cfg.DataDir); n > 0 {
				log.InfoContext(ctx, "pglocal: killed the dead postmaster's leftover processes", "processes", n)
			}
			cancel()
			err := s.restartWithBackoff(ctx, cfg, &failures, log)
			if err != nil {
				if ctx.Err() == nil && !s.isStopping() {
					log.ErrorContext(ctx, "pglocal: giving up on postgres", "failures", failures, "err", err)
					out <- err
				}
				return
			}
		}
	}()
	return out
}

// restartWithBackoff starts the postmaster again, waiting before each try,
// until one comes up (nil) or *failures exceeds MaxFailures.
func (s *Server) restartWithBackoff(ctx context.Context, cfg SuperviseConfig, failures *int, log *slog.Logger) error {
	last := fmt.Errorf("postgres died within %s of its start %d times", cfg.StableAfter, *failures)
	for *failures <= cfg.MaxFailures {
		wait := min(cfg.MinBackoff<<min(*failures-1, 16), cfg.MaxBackoff)
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(wait):
		}
		if s.isStopping() {
			return errors.New("pglocal: stopped")
		}
		sctx, cancel := context.WithTimeout(ctx, s.cfg.StartTimeout)
		last = s.start(sctx, s.cred)
		cancel()
		if last == nil {
			log.InfoContext(ctx, "pglocal: postgres restarted", "starts", s.Starts(), "after", wait)
			return nil
		}
		log.WarnContext(ctx, "pglocal: postgres restart failed", "err", last, "failures", *failures)
		*failures++
	}
	return fmt.Errorf("pglocal: postgres failed %d times in a row: %w", cfg.MaxFailures, last)
}

func (s *Server) isStopping() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.stopping
}

// Starts returns how many postmasters this Server started: 1 plus the
// restarts (0 for a shared server).
func (s *Server) Starts() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.starts
}

// PID returns the running postmaster's process id (0 if none or shared).
func (s *Server) PID() int {
	p := s.current()
	if p == nil || p.cmd.Process == nil {
		return 0
	}
	return p.cmd.Process.Pid
}
