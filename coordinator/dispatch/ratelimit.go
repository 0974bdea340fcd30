package dispatch

import (
	"context"
	"log/slog"
	"sync"
	"time"
)

// RejectRateLimited is the rejection kind (lesfarm_protocol_rejected_total)
// of device requests dropped for exceeding their rate.
const RejectRateLimited = "rate_limited"

// deviceLimiter is a token bucket per device request subject (one device's
// hellos, one device's heartbeats). A healthy agent sends a heartbeat every
// TTL/3 and a hello per reconnect; a device flooding its subjects (a bug, a
// replay, a hostile client) must not take the coordinator's database time
// from the rest of the fleet. Requests over the rate are dropped without
// a reply, which the agent treats like a lost request. It is safe for
// concurrent use.
type deviceLimiter struct {
	rate  float64 // tokens per second
	burst float64

	mu      sync.Mutex
	buckets map[string]*bucket
}

type bucket struct {
	tokens float64
	last   time.Time
}

func newDeviceLimiter(rate float64, burst int) *deviceLimiter {
	return &deviceLimiter{rate: rate, burst: float64(burst), buckets: map[string]*bucket{}}
}

// allow takes a token from key's bucket at now; false when it is empty.
func (l *deviceLimiter) allow(key string, now time.Time) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	b := l.buckets[key]
	if b == nil {
		b = &bucket{tokens: l.burst, last: now}
		l.buckets[key] = b
	}
	b.tokens = min(l.burst, b.tokens+float64(now.Sub(b.last).Seconds()*l.rate))
	b.last = now
	if b.tokens < 1 {
		return false
	}
	b.tokens--
	return true
}

// prune forgets buckets idle long enough to be full again, so the map
// holds only devices heard from lately.
func (l *deviceLimiter) prune(now time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	full := time.Duration(l.burst / l.rate * float64(time.Second))
	for k, b := range l.buckets {
		if now.Sub(b.last) > full {
			delete(l.buckets, k)
		}
	}
}

// logLimiter lets a repeated log line through at most once per interval
// per key and reports how many were suppressed in between, so a flood of
// bad messages costs one line a second, not one line each. It is safe for
// concurrent use.
type logLimiter struct {
	every time.Duration

	mu   sync.Mutex
	seen map[string]*logSeen
}

type logSeen struct {
	last       time.Time
	suppressed int
}

func newLogLimiter(every time.Duration) *logLimiter {
	return &logLimiter{every: every, seen: map[string]*logSeen{}}
}

// warn logs msg at WARN unless key was logged within the interval; the
// line that gets through carries "suppressed", the count held back since.
func (l *logLimiter) warn(ctx context.Context, log *slog.Logger, key, msg string, args ...any) {
	now := time.Now()
	l.mu.Lock()
	s := l.seen[key]
	if s == nil {
		if len(l.seen) > 10000 { // bound the keys: forget them all
			l.seen = map[string]*logSeen{}
		}
		s = &logSeen{}
		l.seen[key] = s
	}
	if !s.last.IsZero() && now.Sub(s.last) < l.every {
		s.suppressed++
		l.mu.Unlock()
		return
	}
	n := s.suppressed
	s.last, s.suppressed = now, 0
	l.mu.Unlock()
	if n > 0 {
		args = append(args, "suppressed", n)
	}
	log.WarnContext(ctx, msg, args...)
}
