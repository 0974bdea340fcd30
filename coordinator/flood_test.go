package coordinator_test

import (
	"bytes"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/lesfarm/lesfarm/coordinator"
	"github.com/lesfarm/lesfarm/coordinator/dispatch"
	"github.com/lesfarm/lesfarm/internal/testenv"
	"github.com/lesfarm/lesfarm/protocol"
)

// syncBuffer is a bytes.Buffer safe for concurrent writers.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestHeartbeatFlood: one device sends 2,000 heartbeats and 2,000
// malformed ones at once. The coordinator answers only the device's
// rate (a burst of 20, then a few per heartbeat interval), drops the rest
// before any database work, logs a handful of lines instead of thousands,
// and keeps serving another device promptly.
func TestHeartbeatFlood(t *testing.T) {
	f := newFarm(t)
	logs := &syncBuffer{}
	c := f.coordinator(t, "c1", func(cfg *coordinator.Config) {
		cfg.HeartbeatTTL = 3 * time.Second
		cfg.Logger = slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelWarn}))
	})
	flooder := newDriver(t, f.natsURL, "flooder")
	flooder.hello(nil)
	var replies atomic.Int32
	inbox := nats.NewInbox()
	sub, err := flooder.nc.Subscribe(inbox, func(*nats.Msg) { replies.Add(1) })
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	const n = 2000
	subject := protocol.HeartbeatSubject("flooder")
	start := time.Now()
	for i := range n {
		data, _ := protocol.Encode(&protocol.Heartbeat{DeviceID: "flooder", Seq: uint64(1000 + i), SentAt: time.Now()})
		if err := flooder.nc.PublishRequest(subject, inbox, data); err != nil {
			t.Fatal(err)
		}
		if err := flooder.nc.Publish(subject, []byte(`{"v":1,"device_id":`)); err != nil {
			t.Fatal(err)
		}
	}
	if err := flooder.nc.Flush(); err != nil {
		t.Fatal(err)
	}
	// Another device is served while the flood is worked through.
	other := newDriver(t, f.natsURL, "bystander")
	t0 := time.Now()
	other.hello(nil)
	if d := time.Since(t0); d > 2*time.Second {
		t.Fatalf("a bystander's hello took %v during the flood", d)
	}
	limited := func() uint64 {
		return c.Rejects().Snapshot()[protocol.RejectKey{Type: "heartbeat", Kind: dispatch.RejectRateLimited}]
	}
	testenv.Eventually(t, 20*time.Second, 20*time.Millisecond, func() error {
		if got := limited() + uint64(replies.Load()); got < 2*n-100 {
			return fmt.Errorf("%d of the flood's %d requests worked through (answered or dropped as rate-limited)", got, 2*n)
		}
		return nil
	})
	elapsed := time.Since(start)
	// Burst 20 plus 4 per heartbeat interval (1 s) over the elapsed time;
	// the genuine heartbeats of the flooder share its bucket.
	if got, most := replies.Load(), int32(20+4*elapsed.Seconds()+4); got > most {
		t.Fatalf("%d of %d flood heartbeats answered in %v, want at most %d", got, n, elapsed, most)
	}
	if limited() < 2*n-200 {
		t.Fatalf("%d requests dropped as rate-limited, want about %d", limited(), 2*n)
	}
	if warns := strings.Count(logs.String(), "level=WARN"); warns > 10 {
		t.Fatalf("%d WARN lines for the flood, want a few (rate-limited): %s", warns, logs.String()[:min(len(logs.String()), 2000)])
	}
	t.Logf("flood of %d worked through in %v: %d answered, %d dropped, %d WARN lines", 2*n, elapsed, replies.Load(), limited(), strings.Count(logs.String(), "level=WARN"))
}
