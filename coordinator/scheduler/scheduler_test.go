package scheduler

import (
	"fmt"
	"testing"
	"time"

	"github.com/lesfarm/lesfarm/jobs"
)

func TestOrder(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	dev := &Device{ID: "d1", Platform: "android", RAMBytes: 8 << 30}
	c := func(id int64, suite string, prio int, age time.Duration) Candidate {
		return Candidate{RunID: id, Suite: suite, Priority: prio, QueuedAt: t0.Add(-age)}
	}
	tests := []struct {
		name  string
		cands []Candidate
		load  Load
		want  []int64
	}{
		{"priority wins", []Candidate{c(1, "a", 0, time.Hour), c(2, "a", 10, 0)}, nil, []int64{2, 1}},
		{"oldest first", []Candidate{c(1, "a", 0, time.Minute), c(2, "a", 0, time.Hour)}, nil, []int64{2, 1}},
		{"id breaks ties", []Candidate{c(5, "a", 0, 0), c(3, "a", 0, 0)}, nil, []int64{3, 5}},
		{"fairness: less loaded suite first", []Candidate{c(1, "nightly", 0, time.Hour), c(2, "smoke", 0, 0)},
			Load{"nightly": 5, "smoke": 1}, []int64{2, 1}},
		{"priority beats fairness", []Candidate{c(1, "nightly", 1, 0), c(2, "smoke", 0, 0)},
			Load{"nightly": 50}, []int64{1, 2}},
		{"pinned elsewhere dropped", []Candidate{{RunID: 1, TargetDeviceID: "d2"}, {RunID: 2, TargetDeviceID: "d1"}}, nil, []int64{2}},
		{"selector mismatch dropped", []Candidate{{RunID: 1, Selector: jobs.Selector{Platform: "ios"}}, {RunID: 2}}, nil, []int64{2}},
		{"empty", nil, nil, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in := append([]Candidate(nil), tt.cands...)
			got := Order(dev, tt.cands, tt.load)
			var ids []int64
			for _, g := range got {
				ids = append(ids, g.RunID)
			}
			if len(ids) != len(tt.want) {
				t.Fatalf("got %v, want %v", ids, tt.want)
			}
			for i := range ids {
				if ids[i] != tt.want[i] {
					t.Fatalf("got %v, want %v", ids, tt.want)
				}
			}
			for i := range in {
				if in[i].RunID != tt.cands[i].RunID {
					t.Fatal("Order modified its input")
				}
			}
			// Best agrees with Order's head, with and without skipping it.
			best, ok := Best(dev, tt.cands, tt.load, nil)
			if ok != (len(tt.want) > 0) || ok && best.RunID != tt.want[0] {
				t.Fatalf("Best = %d %v, want the head of %v", best.RunID, ok, tt.want)
			}
			if len(tt.want) > 0 {
				best, ok = Best(dev, tt.cands, tt.load, func(id int64) bool { return id == tt.want[0] })
				if ok != (len(tt.want) > 1) || ok && best.RunID != tt.want[1] {
					t.Fatalf("Best skipping %d = %d %v, want the second of %v", tt.want[0], best.RunID, ok, tt.want)
				}
			}
		})
	}
}

func TestHeartbeatInterval(t *testing.T) {
	if got := HeartbeatInterval(15 * time.Second); got != 5*time.Second {
		t.Fatal(got)
	}
}

// BenchmarkPlacementPass is one placement pass's picking for 1,000 idle
// devices over a 1,016-run queue head (the dispatcher's shape at 1,000
// agents): Order sorted the head for every device, Best scans it.
//
// go test -run=NONE -bench=PlacementPass ./coordinator/scheduler/
func BenchmarkPlacementPass(b *testing.B) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	sel := jobs.Selector{Labels: map[string]string{"loadtest": "s1"}}
	cands := make([]Candidate, 1016)
	for i := range cands {
		cands[i] = Candidate{RunID: int64(i + 1), Suite: "loadtest", QueuedAt: t0.Add(time.Duration(i) * time.Millisecond), Selector: sel}
	}
	devs := make([]*Device, 1000)
	for i := range devs {
		devs[i] = &Device{ID: fmt.Sprintf("lt-%04d", i), Platform: "android", RAMBytes: 8 << 30, Labels: map[string]string{"loadtest": "s1"}}
	}
	load := Load{"loadtest": 3}
	for _, bc := range []struct {
		name string
		pick func(d *Device, taken map[int64]bool) (Candidate, bool)
	}{
		{"order", func(d *Device, taken map[int64]bool) (Candidate, bool) {
			for _, c := range Order(d, cands, load) {
				if !taken[c.RunID] {
					return c, true
				}
			}
			return Candidate{}, false
		}},
		{"best", func(d *Device, taken map[int64]bool) (Candidate, bool) {
			return Best(d, cands, load, func(id int64) bool { return taken[id] })
		}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				taken := map[int64]bool{}
				for _, d := range devs {
					if c, ok := bc.pick(d, taken); ok {
						taken[c.RunID] = true
					}
				}
			}
		})
	}
}
