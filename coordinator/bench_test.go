package coordinator_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/lesfarm/lesfarm/coordinator"
	"github.com/lesfarm/lesfarm/internal/testenv"
	"github.com/lesfarm/lesfarm/protocol"
)

func pct(ds []time.Duration, p float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[min(len(s)-1, int(p*float64(len(s))))]
}

// BenchmarkAssignment measures assignment latency with 200 simulated
// devices and 2,000 queued runs: every driver completes its run at once and
// waits for the next. Reported:
//   - first_p50/p99: trigger commit to each device's first assignment;
//   - next_p50/p99: a device's result published to its next assignment
//     (result ingest + placement + signed push + ack);
//   - rtt_p50/p99: grant to agent ack inside the coordinator;
//   - runs/s: drain rate of the queue.
//
// go test -run=NONE -bench=Assignment -benchtime=1x ./coordinator/
func BenchmarkAssignment(b *testing.B) {
	const devices, runs = 200, 2000
	for b.Loop() {
		f := newFarm(b)
		c := f.coordinator(b, "bench", func(cfg *coordinator.Config) {
			cfg.HeartbeatTTL = 15 * time.Second // production default: 200 devices heartbeat every 5s
			cfg.LeaseTTL = 15 * time.Second
			cfg.AssignTimeout = 5 * time.Second
		})
		var (
			mu    sync.Mutex
			first []time.Duration
			next  []time.Duration
			done  = make(chan struct{})
			left  = runs
		)
		var triggered time.Time
		var wg sync.WaitGroup
		for i := range devices {
			d := newDriver(b, f.natsURL, fmt.Sprintf("bench-%03d", i))
			d.hello(nil)
			wg.Add(1)
			go func() {
				defer wg.Done()
				var idleSince time.Time
				for {
					select {
					case a := <-d.assigned:
						now := time.Now()
						mu.Lock()
						if idleSince.IsZero() {
							first = append(first, now.Sub(triggered))
						} else {
							next = append(next, now.Sub(idleSince))
						}
						mu.Unlock()
						idleSince = time.Now()
						d.result(a, protocol.OutcomeSucceeded, 0, 0)
						mu.Lock()
						left--
						if left == 0 {
							close(done)
						}
						mu.Unlock()
					case <-done:
						return
					}
				}
			}()
		}
		mu.Lock()
		triggered = time.Now()
		mu.Unlock()
		start := time.Now()
		trigger(b, c.Store(), runs, nil)
		mu.Lock()
		triggered = time.Now() // runs committed: the queue is full
		mu.Unlock()
		select {
		case <-done:
		case <-time.After(5 * time.Minute):
			b.Fatalf("queue not drained: %d runs left", left)
		}
		elapsed := time.Since(start)
		wg.Wait()
		rtt := c.AssignLatencies()
		b.ReportMetric(float64(pct(first, 0.5).Milliseconds()), "first_p50_ms")
		b.ReportMetric(float64(pct(first, 0.99).Milliseconds()), "first_p99_ms")
		b.ReportMetric(float64(pct(next, 0.5).Milliseconds()), "next_p50_ms")
		b.ReportMetric(float64(pct(next, 0.99).Milliseconds()), "next_p99_ms")
		b.ReportMetric(float64(pct(rtt, 0.5).Microseconds())/1000, "rtt_p50_ms")
		b.ReportMetric(float64(pct(rtt, 0.99).Microseconds())/1000, "rtt_p99_ms")
		b.ReportMetric(float64(runs)/elapsed.Seconds(), "runs/s")
		ctx := context.Background()
		testenv.Eventually(b, time.Minute, 50*time.Millisecond, func() error {
			var pending, dup int
			_ = c.Store().Pool().QueryRow(ctx, `SELECT count(*) FILTER (WHERE state <> 'succeeded'), count(*) FILTER (WHERE attempts <> 1) FROM runs`).Scan(&pending, &dup)
			if dup != 0 {
				b.Fatalf("%d runs granted more than once", dup)
			}
			if pending != 0 {
				return fmt.Errorf("%d runs not succeeded", pending)
			}
			return nil
		})
	}
}
