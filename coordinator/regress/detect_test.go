package regress

import (
	"math"
	"math/rand/v2"
	"testing"
)

// series builds points with levels[i] and relative gaussian noise cv,
// deterministic for seed.
func series(seed uint64, cv float64, levels ...float64) []Point {
	rng := rand.New(rand.NewPCG(seed, 7))
	pts := make([]Point, len(levels))
	for i, l := range levels {
		pts[i] = Point{Seq: int64(100 + i), Value: l * (1 + cv*rng.NormFloat64())}
	}
	return pts
}

// steps returns n1 copies of a then n2 copies of b, and so on in pairs.
func steps(pairs ...float64) []float64 {
	var out []float64
	for i := 0; i+1 < len(pairs); i += 2 {
		for range int(pairs[i+1]) {
			out = append(out, pairs[i])
		}
	}
	return out
}

func TestDetectCrafted(t *testing.T) {
	t.Parallel()
	withOutlierAtEnd := series(3, 0.01, steps(100, 30)...)
	withOutlierAtEnd[len(withOutlierAtEnd)-1].Value = 70
	twoOutliersApart := series(4, 0.01, steps(100, 30)...)
	twoOutliersApart[10].Value, twoOutliersApart[20].Value = 75, 72
	constantThenStep := make([]Point, 0, 20)
	for i := range 20 {
		v := 50.0
		if i >= 15 {
			v = 45
		}
		constantThenStep = append(constantThenStep, Point{Seq: int64(i), Value: v})
	}
	tests := []struct {
		name   string
		pts    []Point
		higher bool
		want   []Direction // directions of the expected change points, in order
		seqs   []int64     // expected seqs (±1), same order
	}{
		{"flat noise", series(1, 0.02, steps(100, 40)...), true, nil, nil},
		{"flat noise lower-is-better", series(2, 0.03, steps(100, 40)...), false, nil, nil},
		{"throughput drops 10%", series(5, 0.01, steps(100, 25, 90, 8)...), true, []Direction{Regression}, []int64{125}},
		{"throughput rises 10%", series(6, 0.01, steps(100, 25, 110, 8)...), true, []Direction{Improvement}, []int64{125}},
		{"TTFT drops 10% is an improvement", series(7, 0.01, steps(100, 25, 90, 8)...), false, []Direction{Improvement}, []int64{125}},
		{"TTFT rises 10% is a regression", series(8, 0.01, steps(100, 25, 110, 8)...), false, []Direction{Regression}, []int64{125}},
		{"drop seen with two points after", series(9, 0.01, steps(100, 25, 85, 2)...), true, []Direction{Regression}, []int64{125}},
		{"one point after is not enough", series(10, 0.01, steps(100, 25, 80, 1)...), true, nil, nil},
		{"single outlier at the end", withOutlierAtEnd, true, nil, nil},
		{"isolated outliers", twoOutliersApart, true, nil, nil},
		{"step below minimum effect", series(11, 0.001, steps(100, 25, 99, 10)...), true, nil, nil},
		{"two steps", series(12, 0.01, steps(100, 20, 90, 15, 100, 10)...), true, []Direction{Regression, Improvement}, []int64{120, 135}},
		{"constant then step", constantThenStep, true, []Direction{Regression}, []int64{15}},
		{"too short", series(13, 0.01, steps(100, 2, 50, 1)...), true, nil, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			for _, m := range []Method{MethodPELT, MethodEDivisive} {
				cps, err := Detect(tc.pts, tc.higher, Config{Method: m})
				if err != nil {
					t.Fatalf("%s: Detect: %v", m, err)
				}
				if len(cps) != len(tc.want) {
					t.Fatalf("%s: got %d change points %+v, want %d", m, len(cps), cps, len(tc.want))
				}
				for i, cp := range cps {
					if cp.Direction != tc.want[i] {
						t.Errorf("%s: cp %d direction %s, want %s", m, i, cp.Direction, tc.want[i])
					}
					if d := cp.Seq - tc.seqs[i]; d < -1 || d > 1 {
						t.Errorf("%s: cp %d at seq %d, want %d±1", m, i, cp.Seq, tc.seqs[i])
					}
					if cp.PValue >= DefaultAlpha || math.Abs(cp.RelativeChange) < 0.02 {
						t.Errorf("%s: cp %d p=%g rel=%g passed confirmation", m, i, cp.PValue, cp.RelativeChange)
					}
				}
			}
		})
	}
}

func TestDetectRelativeChangeAndMeans(t *testing.T) {
	t.Parallel()
	pts := series(20, 0.005, steps(200, 20, 180, 10)...)
	cps, err := Detect(pts, true, Config{})
	if err != nil || len(cps) != 1 {
		t.Fatalf("Detect = %+v, %v; want one change point", cps, err)
	}
	cp := cps[0]
	if math.Abs(cp.RelativeChange+0.10) > 0.01 || math.Abs(cp.BeforeMean-200) > 2 || math.Abs(cp.AfterMean-180) > 2 {
		t.Fatalf("change point %+v: want -10%%, 200 → 180", cp)
	}
	if cp.BeforeN != 20 || cp.AfterN != 10 {
		t.Fatalf("segments %d/%d, want 20/10", cp.BeforeN, cp.AfterN)
	}
}

// TestDetectUsesRepetitions: the same means are significant when each
// point is a precise mean of many repetitions, and the noisy point gets
// less weight than precise ones.
func TestDetectUsesRepetitions(t *testing.T) {
	t.Parallel()
	// Precise points except one noisy outlying point in the after segment.
	pts := series(30, 0.01, steps(100, 20, 95, 4)...)
	for i := range pts {
		pts[i].Stddev, pts[i].N = 1, 10
	}
	pts[len(pts)-1].Value, pts[len(pts)-1].Stddev, pts[len(pts)-1].N = 110, 40, 2
	cps, err := Detect(pts, true, Config{MWAlpha: -1})
	if err != nil || len(cps) != 1 {
		t.Fatalf("Detect = %+v, %v; want one change point", cps, err)
	}
	// The noisy 110 weighs little: the weighted after-mean stays near 95.
	if cps[0].AfterMean > 98 {
		t.Fatalf("after mean %.2f: the imprecise point was not down-weighted", cps[0].AfterMean)
	}
}

// TestDetectRerunsShareSeq: reruns of a build (same seq) stay on one side
// of a change.
func TestDetectRerunsShareSeq(t *testing.T) {
	t.Parallel()
	var pts []Point
	for i, p := range series(60, 0.005, steps(100, 20, 90, 6)...) {
		pts = append(pts, Point{Seq: int64(i / 2), Value: p.Value}) // two results per seq
	}
	cps, err := Detect(pts, true, Config{})
	if err != nil || len(cps) != 1 || cps[0].Seq != 10 {
		t.Fatalf("Detect = %+v, %v; want one change at seq 10", cps, err)
	}
	for _, p := range pts[:cps[0].Index] {
		if p.Seq >= cps[0].Seq {
			t.Fatalf("point at seq %d before a change at seq %d", p.Seq, cps[0].Seq)
		}
	}
}

func TestDetectDeterministicAndOrderFree(t *testing.T) {
	t.Parallel()
	pts := series(40, 0.02, steps(100, 30, 93, 6)...)
	a, _ := Detect(pts, true, Config{Method: MethodEDivisive})
	rev := make([]Point, len(pts))
	for i, p := range pts {
		rev[len(pts)-1-i] = p
	}
	b, _ := Detect(rev, true, Config{Method: MethodEDivisive})
	if len(a) != len(b) || len(a) == 0 {
		t.Fatalf("got %v and %v", a, b)
	}
	for i := range a {
		if a[i] != b[i] {
			t.Fatalf("input order changed the result: %+v vs %+v", a[i], b[i])
		}
	}
}

func TestConfigValidate(t *testing.T) {
	t.Parallel()
	bad := []Config{{Method: "cusum"}, {Alpha: 2}, {Alpha: -1}, {MinEffect: -0.1}, {MinSegment: -1}, {Penalty: -1}, {Window: 2}, {MWAlpha: 1}}
	for _, c := range bad {
		if err := c.Validate(); err == nil {
			t.Errorf("Validate(%+v) = nil, want error", c)
		}
		if _, err := Detect(series(1, 0.01, steps(1, 10)...), true, c); err == nil {
			t.Errorf("Detect with %+v: want error", c)
		}
	}
	if err := (Config{}).Validate(); err != nil {
		t.Fatalf("zero Config invalid: %v", err)
	}
}

func TestStudentAndMannWhitney(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ t, df, want float64 }{
		{2.0, 10, 0.07339},
		{2.228, 10, 0.05},
		{1.96, 1e6, 0.05},
		{0, 5, 1},
		{12.706, 1, 0.05},
	} {
		if got := studentTwoSided(tc.t, tc.df); math.Abs(got-tc.want) > 5e-4 {
			t.Errorf("studentTwoSided(%v, %v) = %v, want %v", tc.t, tc.df, got, tc.want)
		}
	}
	for _, tc := range []struct {
		a, b []float64
		want float64
	}{
		{[]float64{1, 2, 3}, []float64{4, 5, 6}, 0.1},                           // exact: 2/C(6,3)
		{[]float64{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}, []float64{20, 21}, 2.0 / 66}, // exact: 2/C(12,2)
		{[]float64{1, 4, 2, 5}, []float64{3, 6, 0}, 1},
	} {
		if got := mannWhitney(tc.a, tc.b); math.Abs(got-tc.want) > 1e-9 {
			t.Errorf("mannWhitney(%v, %v) = %v, want %v", tc.a, tc.b, got, tc.want)
		}
	}
	// Ties use the normal approximation and stay within (0, 1].
	if p := mannWhitney([]float64{1, 1, 1, 2}, []float64{2, 2, 3}); p <= 0 || p > 1 {
		t.Errorf("tied mannWhitney p = %v", p)
	}
}

func TestMetricDirections(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		metric        string
		higher, known bool
		les           bool
	}{
		{"decode_tps", true, true, false},
		{"tok/s", true, true, false},
		{"ttft_ms", false, true, false},
		{"peak_memory_bytes", false, true, false},
		{"stall_fraction", false, true, true},
		{"bytes_per_token", false, true, true},
		{"hit_rate", true, true, true},
		{"predictor_recall.l12", true, true, true},
		{"frobnication", false, false, false},
	} {
		h, k := HigherIsBetter(tc.metric)
		if h != tc.higher || k != tc.known || IsLESMetric(tc.metric) != tc.les {
			t.Errorf("%s: higher=%v known=%v les=%v", tc.metric, h, k, IsLESMetric(tc.metric))
		}
	}
	if b, l := SplitMetric("recall.l7"); b != MetricPredictorRecall || l != 7 {
		t.Errorf("SplitMetric = %s, %d", b, l)
	}
}

func TestSeriesKeyRoundTrip(t *testing.T) {
	t.Parallel()
	k := SeriesKey{Suite: "nightly", Config: "q4-lookahead", Metric: "decode_tps", DeviceModel: "phone-mid", OSMajor: "android 14", Lineage: "main", Emulated: true}
	got, err := ParseSeriesKey(k.String())
	if err != nil || got != k {
		t.Fatalf("round trip: %+v, %v", got, err)
	}
	if k.Platform() != "emulated-android" {
		t.Fatalf("Platform = %q", k.Platform())
	}
	if _, err := ParseSeriesKey("a/b"); err == nil {
		t.Fatal("ParseSeriesKey accepted a/b")
	}
}
