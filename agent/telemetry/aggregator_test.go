package telemetry

import (
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/lesfarm/lesfarm/internal/testenv"
	"github.com/lesfarm/lesfarm/protocol"
	"github.com/lesfarm/lesfarm/runtime/trace"
)

type collector struct {
	mu      sync.Mutex
	batches []*protocol.TelemetryBatch
}

func (c *collector) emit(b *protocol.TelemetryBatch) {
	c.mu.Lock()
	c.batches = append(c.batches, b)
	c.mu.Unlock()
}

func (c *collector) get() []*protocol.TelemetryBatch {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]*protocol.TelemetryBatch(nil), c.batches...)
}

func step(a *Aggregator, i, layers int) {
	for l := range layers {
		a.Layer(&trace.LayerEvent{Step: i, Layer: l, Hits: l, Misses: 1, PrefetchUsed: 2, PrefetchWasted: 3})
	}
	a.Token(&trace.TokenEvent{Step: i, Phase: trace.Decode, Pos: i, Tokens: 1, Duration: time.Millisecond, Stall: time.Microsecond, BytesRead: 100, CacheBytes: 1000})
}

func TestAggregatorBatchesBySizeWithGaplessSeq(t *testing.T) {
	var c collector
	a := NewAggregator(AggregatorConfig{RunID: 3, Token: 9, DeviceID: "d1", FlushEvery: time.Hour, MaxEvents: 10, Emit: c.emit})
	a.SetPosition(2, -1)
	for i := range 25 {
		step(a, i, 4)
	}
	a.Close()
	bs := c.get()
	if len(bs) != 3 {
		t.Fatalf("%d batches, want 3 (10+10+5)", len(bs))
	}
	total := 0
	for i, b := range bs {
		if b.Seq != uint64(i) || b.RunID != 3 || b.Token != 9 || b.DeviceID != "d1" {
			t.Fatalf("batch %d: seq %d run %d token %d", i, b.Seq, b.RunID, b.Token)
		}
		if err := b.Validate(); err != nil {
			t.Fatalf("batch %d invalid: %v", i, err)
		}
		for _, s := range b.Samples {
			if s.Step != total || s.ConfigIndex != 2 || s.Repetition != -1 || s.Phase != protocol.PhaseDecode {
				t.Fatalf("sample %+v", s)
			}
			if l := s.Layers; l == nil || len(l.Hits) != 4 || l.Hits[3] != 3 || l.Misses[0] != 1 || l.PrefetchWasted[2] != 3 {
				t.Fatalf("layers %+v", s.Layers)
			}
			total++
		}
	}
	if bt, st := a.Counts(); bt != 3 || st != 25 {
		t.Fatalf("counts %d batches %d samples", bt, st)
	}
	// The batches survive the wire format.
	data, err := protocol.Encode(bs[0])
	if err != nil {
		t.Fatal(err)
	}
	back, err := protocol.DecodeTelemetry(data)
	if err != nil || len(back.Samples) != 10 || back.Samples[9].Layers.Hits[3] != 3 {
		t.Fatalf("round trip: %v", err)
	}
}

func TestAggregatorFlushesOnTimer(t *testing.T) {
	var c collector
	a := NewAggregator(AggregatorConfig{RunID: 1, Token: 1, DeviceID: "d", FlushEvery: 20 * time.Millisecond, MaxEvents: 1000, Emit: c.emit})
	defer a.Close()
	step(a, 0, 2)
	step(a, 1, 2)
	testenv.Eventually(t, 2*time.Second, 5*time.Millisecond, func() error {
		if len(c.get()) == 0 {
			return errors.New("no batch flushed after the interval")
		}
		return nil
	})
	bs := c.get()
	if len(bs) != 1 || len(bs[0].Samples) != 2 {
		t.Fatalf("after the interval: %d batches", len(bs))
	}
	a.Progress(protocol.Progress{Phase: "download", Done: 5, Total: 10})
	testenv.Eventually(t, 2*time.Second, 5*time.Millisecond, func() error {
		if len(c.get()) == 1 {
			return errors.New("no progress batch flushed after the interval")
		}
		return nil
	})
	bs = c.get()
	if len(bs) != 2 || bs[1].Progress == nil || bs[1].Progress.Done != 5 || bs[1].Seq != 1 {
		t.Fatalf("progress batch missing: %d batches", len(bs))
	}
}

// BenchmarkAggregatorStep measures the sink's cost per decoded token of a
// 48-layer model (one Layer event per layer plus the Token event).
func BenchmarkAggregatorStep(b *testing.B) {
	a := NewAggregator(AggregatorConfig{RunID: 1, Token: 1, DeviceID: "d", FlushEvery: time.Hour, MaxEvents: 256, Emit: func(*protocol.TelemetryBatch) {}})
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		step(a, i, 48)
		i++
	}
}
