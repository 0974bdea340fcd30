package regress

import (
	"math"
	"math/rand/v2"
	"testing"
)

func TestPoolNoise(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		in   []NoisePrior
		want NoisePrior
	}{
		{"none", nil, NoisePrior{}},
		{"weighted by df", []NoisePrior{{RelVar: 1e-4, DF: 30}, {RelVar: 4e-4, DF: 10}}, NoisePrior{RelVar: (30*1e-4 + 10*4e-4) / 40, DF: 40}},
		{"empty estimates skipped", []NoisePrior{{}, {RelVar: 2e-4, DF: 5}, {RelVar: math.Inf(1), DF: 3}}, NoisePrior{RelVar: 2e-4, DF: 5}},
	} {
		got := PoolNoise(tc.in)
		if math.Abs(got.RelVar-tc.want.RelVar) > 1e-15 || got.DF != tc.want.DF {
			t.Errorf("%s: %+v, want %+v", tc.name, got, tc.want)
		}
	}
}

func TestPooledVar(t *testing.T) {
	t.Parallel()
	const level2 = 100 * 100
	for _, tc := range []struct {
		name           string
		s2, df         float64
		prior          NoisePrior
		maxDF          float64
		wantS2, wantDF float64
	}{
		{"no prior", 9, 12, NoisePrior{}, 100, 9, 12},
		{"pooling off", 9, 12, NoisePrior{RelVar: 1e-3, DF: 50}, -1, 9, 12},
		{"agreeing prior", 9, 12, NoisePrior{RelVar: 1e-3, DF: 50}, 100, (12*9 + 50*10) / 62.0, 62},
		{"prior capped at maxDF", 9, 12, NoisePrior{RelVar: 1e-3, DF: 500}, 100, (12*9 + 100*10) / 112.0, 112},
		{"series much noisier than its pool keeps its own", 60, 20, NoisePrior{RelVar: 1e-3, DF: 200}, 100, 60, 20},
		{"series much quieter than its pool keeps its own", 1, 20, NoisePrior{RelVar: 1e-3, DF: 200}, 100, 1, 20},
	} {
		s2, df := pooledVar(tc.s2, tc.df, level2, tc.prior, tc.maxDF)
		if math.Abs(s2-tc.wantS2) > 1e-9 || df != tc.wantDF {
			t.Errorf("%s: (%g, %g), want (%g, %g)", tc.name, s2, df, tc.wantS2, tc.wantDF)
		}
	}
}

// TestSeriesNoise: a series' noise estimate is the residual variance
// around its confirmed segments, relative to their levels: a clear step
// does not count as noise, and bad runs set aside do not either.
func TestSeriesNoise(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(7, 1))
	const cv = 0.02
	var sum float64
	const series = 40
	for range series {
		pts := make([]Point, 60)
		for i := range pts {
			level := 100.0
			if i >= 30 {
				level = 115 // a clear step: 7.5 CVs
			}
			pts[i] = Point{Seq: int64(i + 1), Value: level * (1 + cv*rng.NormFloat64())}
		}
		pts[12].Value *= 0.7 // a bad run
		e := SeriesNoise(pts, true, Config{})
		if e.DF < 55 || e.DF > 57 {
			t.Fatalf("df %g, want 57 (60 points, one bad run set aside, two segments)", e.DF)
		}
		sum += e.RelVar
	}
	if r := sum / series / (cv * cv); r < 0.9 || r > 1.1 {
		t.Errorf("mean estimate %.3g of CV², want within 10%%", r)
	}
	if e := SeriesNoise([]Point{{Seq: 1, Value: 1}, {Seq: 2, Value: 2}}, true, Config{}); e != (NoisePrior{}) {
		t.Errorf("two points: %+v, want none", e)
	}
}

// TestDetectPooledShortSeries: on short series (16 points, the step 6 to
// 10 points from the end, CV 3%) the siblings' noise level finds clearly
// more 6% steps than the series' own few degrees of freedom, while null
// series of the same kind alert no more often; a prior far off the
// series' own noise is not used.
func TestDetectPooledShortSeries(t *testing.T) {
	t.Parallel()
	const cv, n, trials = 0.03, 16, 300
	rng := rand.New(rand.NewPCG(11, 3))
	prior := NoisePrior{RelVar: cv * cv, DF: 100}
	draw := func(step float64) []Point {
		after := 6 + rng.IntN(5)
		pts := make([]Point, n)
		for i := range pts {
			level := 100.0
			if i >= n-after {
				level *= 1 + step
			}
			pts[i] = Point{Seq: int64(i + 1), Value: level * (1 + cv*rng.NormFloat64())}
		}
		return pts
	}
	var ownHits, pooledHits, ownNull, pooledNull, offNull int
	for range trials {
		pts := draw(-0.06)
		own, _ := Detect(pts, true, Config{Once: true})
		pooled, _ := DetectPooled(pts, true, Config{Once: true}, prior)
		ownHits += min(len(own), 1)
		pooledHits += min(len(pooled), 1)
		null := draw(0)
		own, _ = Detect(null, true, Config{Once: true})
		pooled, _ = DetectPooled(null, true, Config{Once: true}, prior)
		off, _ := DetectPooled(null, true, Config{Once: true}, NoisePrior{RelVar: cv * cv / 16, DF: 1000})
		ownNull += min(len(own), 1)
		pooledNull += min(len(pooled), 1)
		offNull += min(len(off), 1)
	}
	t.Logf("6%% steps found: own noise %d, pooled %d of %d; null series alerting: %d, %d (a prior 4x too quiet: %d)", ownHits, pooledHits, trials, ownNull, pooledNull, offNull)
	if pooledHits < ownHits+trials/10 {
		t.Errorf("pooled noise found %d of %d steps, own noise %d: want at least 10 points more", pooledHits, trials, ownHits)
	}
	if pooledNull > ownNull+trials/100 || pooledNull > trials/50 {
		t.Errorf("null series alerting: pooled %d, own %d of %d", pooledNull, ownNull, trials)
	}
	if offNull > trials/50 {
		t.Errorf("a prior 4x too quiet made %d of %d null series alert: the agreement check should refuse it", offNull, trials)
	}
}

// TestSiblingOf: siblings share metric, device model, OS major and
// emulation, whatever their suite, config or lineage; a series is not its
// own sibling.
func TestSiblingOf(t *testing.T) {
	t.Parallel()
	k := SeriesKey{Suite: "s", Config: "c", Metric: MetricDecodeTPS, DeviceModel: "m", OSMajor: "android 14", Lineage: "main"}
	for _, tc := range []struct {
		name string
		edit func(*SeriesKey)
		want bool
	}{
		{"itself", func(*SeriesKey) {}, false},
		{"other config", func(o *SeriesKey) { o.Config = "d" }, true},
		{"other suite and lineage", func(o *SeriesKey) { o.Suite, o.Lineage = "t", "release-3" }, true},
		{"other metric", func(o *SeriesKey) { o.Config, o.Metric = "d", MetricPrefillTPS }, false},
		{"other model", func(o *SeriesKey) { o.Config, o.DeviceModel = "d", "n" }, false},
		{"other OS", func(o *SeriesKey) { o.Config, o.OSMajor = "d", "android 13" }, false},
		{"emulated", func(o *SeriesKey) { o.Config, o.Emulated = "d", true }, false},
	} {
		o := k
		tc.edit(&o)
		if got := k.SiblingOf(o); got != tc.want {
			t.Errorf("%s: SiblingOf = %v, want %v", tc.name, got, tc.want)
		}
	}
}
