package expert

import (
	"context"
	"testing"
	"time"

	"github.com/lesfarm/lesfarm/runtime/moe"
)

// TestDeviceTimeEvictsPrefetchStillLanding: in device time a speculative
// read can be done on the host long before it lands on the device clock,
// and its buffer cannot be evicted until it lands. When such prefetches
// fill the budget and a Use needs room, the device waits for the earliest
// of them and then evicts it: the Use is served and the wait counts as
// stall. (The store used to give up with "budget cannot hold the experts
// this step needs", which failed about one prefill in ten of the lookahead
// and scheduled modes at a 25% budget.)
func TestDeviceTimeEvictsPrefetchStillLanding(t *testing.T) {
	m := newTestModel(t, 2, 8, 64, 64, true)
	prof := &Profile{Name: "slow-flash", Bandwidth: 1e6, Latency: 100 * time.Microsecond, MaxInFlight: 4,
		Compute: &Compute{WeightBandwidth: 10e9, Throughput: 1e12}}
	for _, mode := range []Mode{Lookahead, Scheduled} {
		s, err := New(m.path, m.layout, m.shapes, Options{Mode: mode, Budget: 2 * m.expertBytes(), Profile: prof, DeviceTime: true, Workers: 4, PredictK: 2})
		if err != nil {
			t.Fatal(err)
		}
		s.Prefetch(1, []int{0, 1}) // fills the budget
		waitFor(t, "both prefetches read on the host", func() bool { return s.Meter().Stats().Reads == 2 })
		before := s.Meter().Stats()
		served := 0
		err = s.Use(context.Background(), 0, []int{2, 3}, func(i int, w moe.Weights) error {
			served++
			return m.check(0, []int{2, 3}[i], w)
		})
		if err != nil || served != 2 {
			s.Close()
			t.Fatalf("%s: Use with the budget held by prefetches still landing: %v (%d of 2 served)", mode, err, served)
		}
		// Two prefetches of 3·64·64·4 bytes at 1 MB/s land after about
		// 49 ms each on the device: the Use waited at least for the first.
		if got := s.Meter().Stats().Sub(before).DeviceStall; got < 40*time.Millisecond {
			t.Errorf("%s: device stall %v, want the wait for a prefetch to land (≥ 40ms)", mode, got)
		}
		s.Close()
	}
}
