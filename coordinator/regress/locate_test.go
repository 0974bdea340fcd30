package regress

import "testing"

// TestLocationRange: a clear step has a range of one point (the point
// before it surely good), a faint one a wider range that still holds it,
// and a step from the second point has no surely-good point.
func TestLocationRange(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		cv      float64
		levels  []float64
		seq     int64 // the step's first point
		maxWide int64 // most points the range may span
	}{
		{"10% at CV 0.5%", 0.005, steps(100, 20, 90, 10), 120, 1},
		{"6% at CV 2.5%", 0.025, steps(100, 20, 94, 20), 120, 8},
	} {
		t.Run(tc.name, func(t *testing.T) {
			held, n := 0, 0
			for seed := range uint64(20) {
				cps, err := Detect(drawn(seed+40, DesignSeries, tc.cv, tc.levels...), true, Config{Once: true})
				if err != nil {
					t.Fatal(err)
				}
				if len(cps) != 1 {
					continue
				}
				cp := cps[0]
				n++
				if !(cp.LastGoodSeq < cp.Seq && cp.Seq <= cp.FirstBadSeq) {
					t.Fatalf("seed %d: range (%d, %d] does not hold the change's own seq %d", seed, cp.LastGoodSeq, cp.FirstBadSeq, cp.Seq)
				}
				if w := cp.FirstBadSeq - cp.LastGoodSeq; w > tc.maxWide {
					t.Errorf("seed %d: range (%d, %d] spans %d points, want <= %d", seed, cp.LastGoodSeq, cp.FirstBadSeq, w, tc.maxWide)
				}
				if cp.LastGoodSeq < tc.seq && tc.seq <= cp.FirstBadSeq {
					held++
				}
				if got := cp.RangeString(); got == "" {
					t.Errorf("seed %d: empty range string", seed)
				}
			}
			if n < 15 || held < n*9/10 {
				t.Errorf("range held the step in %d of %d series with one change (of 20)", held, n)
			}
		})
	}
	// A step at the second point: nothing before it is surely good.
	pts := []Point{{Seq: 1, Value: 100}, {Seq: 2, Value: 80}, {Seq: 3, Value: 80.1}, {Seq: 4, Value: 79.9}, {Seq: 5, Value: 80}}
	first, last, near := locationRange(pts, []int{1}, 0, 1, 0.01)
	if first != 1 || last != 1 || near < 0.99 {
		t.Errorf("step at the second point: range [%d, %d], mass near %g", first, last, near)
	}
}

// TestRelocate: a boundary left off by dropped neighbours moves to the
// best split between its neighbours; one already there stays.
func TestRelocate(t *testing.T) {
	t.Parallel()
	var pts []Point
	for i, v := range []float64{10, 10.1, 9.9, 10, 10.05, 12, 12.1, 11.9, 12, 12.05} {
		pts = append(pts, Point{Seq: int64(i + 1), Value: v})
	}
	for _, tc := range []struct {
		b     []int
		want  int
		moved bool
	}{
		{[]int{3}, 5, true},
		{[]int{7}, 5, true},
		{[]int{5}, 5, false},
	} {
		b := append([]int(nil), tc.b...)
		if moved := relocate(pts, b, 2); moved != tc.moved || b[0] != tc.want {
			t.Errorf("relocate(%v) = %v (moved %v), want [%d] (moved %v)", tc.b, b, moved, tc.want, tc.moved)
		}
	}
}

// TestRefine: placing a change at the split with the most posterior mass
// within one point places more faint steps within one build than the
// single most likely split, and leaves a clear step where it is.
func TestRefine(t *testing.T) {
	t.Parallel()
	pts := drawn(7, DesignSeries, 0.005, steps(100, 20, 90, 10)...)
	b := []int{18}
	relocate(pts, b, 2)
	refine(pts, b, 2, 0.25)
	if b[0] != 20 {
		t.Errorf("clear step at 20: refined to %d", b[0])
	}
	mle, win := 0, 0
	for seed := range uint64(300) {
		pts := drawn(seed+2000, DesignSeries, 0.03, steps(100, 25, 95, 15)...)
		b := []int{25}
		relocate(pts, b, 2)
		if abs(b[0]-25) <= 1 {
			mle++
		}
		s2, _ := segmentedVar(pts, b)
		refine(pts, b, 2, s2)
		if abs(b[0]-25) <= 1 {
			win++
		}
	}
	t.Logf("5%% step at CV 3%%: within one point in %d/300 (most likely split), %d/300 (refined)", mle, win)
	if win <= mle {
		t.Errorf("refined placement within one point in %d/300 series, the most likely split in %d", win, mle)
	}
}
