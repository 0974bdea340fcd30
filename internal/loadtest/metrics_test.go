package loadtest

import (
	"testing"
	"time"
)

// TestIngestRates checks the window, steady and backlog rates on a
// scripted series of scrapes: one coordinator, sent climbing 1,000/s from
// t=1 s, committed climbing as fast from t=3 s within the 10 s window,
// and catching up during the drain.
func TestIngestRates(t *testing.T) {
	t0 := time.Unix(1_000_000, 0)
	var points []scrapePoint
	add := func(sec float64, sent, committed int64) {
		points = append(points, scrapePoint{at: t0.Add(time.Duration(sec * float64(time.Second))), sent: sent, ingested: []int64{100 + committed},
			cpu: []float64{0}, rss: []int64{1}, mem: []MemoryBreakdown{{}}, phases: []map[string]float64{nil}})
	}
	add(0, 0, 0)
	for s := 1; s <= 10; s++ {
		add(float64(s), int64(1000*(s-1)), int64(max(0, 1000*(s-3))))
	}
	// Drain (past the window's last point, end + one interval): nothing
	// more sent, the 2,000 behind committed by t=13.
	add(12, 9000, 8000)
	add(13, 9000, 9000)
	add(14, 9000, 9000)
	s := &scraper{urls: []string{"u"}, every: time.Second, points: points}
	rep := &Report{}
	s.fill(rep, t0.Add(10*time.Second))

	for _, c := range []struct {
		name      string
		got, want float64
	}{
		{"window ingested/s", rep.IngestedPerS, 700}, // 7,000 committed over 10 s
		{"steady sent/s", rep.SteadySentPerS, 1000},  // t=5..10
		{"steady ingested/s", rep.SteadyIngestedPerS, 1000},
		// A backlog at both ends of every interval from t=2 (sent 1,000,
		// committed 0) to t=12 (9,000 / 8,000): 10 s, 8,000 committed.
		{"backlog s", rep.BacklogS, 10},
		{"backlog ingested/s", rep.BacklogIngestedPerS, 800},
		{"lag max s", rep.IngestLagMaxS, 3}, // t=3: nothing committed, as at t=0
	} {
		if c.got != c.want {
			t.Errorf("%s = %g, want %g", c.name, c.got, c.want)
		}
	}
}
