package protocol

import (
	"math"
	"strings"
	"testing"

	"github.com/lesfarm/lesfarm/jobs"
)

func testBounds() *RunBounds {
	return &RunBounds{Configs: []jobs.Config{{Index: 0, Key: "resident"}, {Index: 1, Key: "on-demand/budget=50%"}}, ModelBytes: 33 << 20}
}

func goodConfig() ConfigResult {
	return ConfigResult{ConfigIndex: 1, ConfigKey: "on-demand/budget=50%", Valid: true,
		DecodeTPS: Stat{N: 3, Mean: 20, Median: 20, Stddev: 1, CV: 0.05, Min: 19, Max: 21}, PrefillTPS: Stat{N: 3, Mean: 200, Median: 200},
		TTFTMS: Stat{N: 3, Mean: 80, Median: 80}, HitRate: 0.9, StallFraction: 0.1, BytesPerToken: 1 << 20, PeakMemoryBytes: 1 << 30}
}

// TestRunBoundsCheckResult is the garbage of issue 29, finding 2, one
// value at a time: each is refused with the field named.
func TestRunBoundsCheckResult(t *testing.T) {
	for _, c := range []struct {
		name  string
		edit  func(*ConfigResult)
		field string // "" = accepted
	}{
		{"plausible", func(*ConfigResult) {}, ""},
		{"decode 1e308", func(c *ConfigResult) { c.DecodeTPS.Mean = 1e308 }, "decode_tps.mean"},
		{"ttft -1e308", func(c *ConfigResult) { c.TTFTMS.Mean = -1e308 }, "ttft_ms.mean"},
		{"negative throughput", func(c *ConfigResult) { c.PrefillTPS.Median = -5 }, "prefill_tps.median"},
		{"NaN", func(c *ConfigResult) { c.DecodeTPS.Stddev = math.NaN() }, "decode_tps.stddev"},
		{"+Inf", func(c *ConfigResult) { c.DecodeTPS.Max = math.Inf(1) }, "decode_tps.max"},
		{"-Inf cv", func(c *ConfigResult) { c.DecodeTPS.CV = math.Inf(-1) }, "decode_tps.cv"},
		{"NaN hit rate", func(c *ConfigResult) { c.HitRate = math.NaN() }, "hit_rate"},
		{"stall above 1", func(c *ConfigResult) { c.StallFraction = 1.5 }, "stall_fraction"},
		{"bytes per token beyond the model", func(c *ConfigResult) { c.BytesPerToken = 1 << 40 }, "bytes_per_token"},
		{"huge extra", func(c *ConfigResult) { c.Extra = map[string]float64{"thermal": 1e300} }, "extra.thermal"},
		{"unknown config index", func(c *ConfigResult) { c.ConfigIndex = 7; c.ConfigKey = "does-not-exist" }, "config_index"},
		{"unknown key", func(c *ConfigResult) { c.ConfigKey = "does-not-exist" }, "config_key"},
	} {
		t.Run(c.name, func(t *testing.T) {
			cf := goodConfig()
			c.edit(&cf)
			err := testBounds().CheckResult(&Result{Configs: []ConfigResult{cf}})
			if c.field == "" {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), c.field) {
				t.Fatalf("CheckResult = %v, want an error naming %s", err, c.field)
			}
		})
	}
	// Unknown model size: bytes are bounded by MaxMeasuredBytes instead.
	cf := goodConfig()
	cf.BytesPerToken = 1 << 40
	if err := (&RunBounds{Configs: testBounds().Configs}).CheckResult(&Result{Configs: []ConfigResult{cf}}); err != nil {
		t.Fatalf("unknown model size: %v", err)
	}
}

func TestRunBoundsCheckTelemetry(t *testing.T) {
	for _, c := range []struct {
		name string
		edit func(*Sample)
		ok   bool
	}{
		{"plausible", func(*Sample) {}, true},
		{"config 99", func(s *Sample) { s.ConfigIndex = 99 }, false},
		{"config 2 of 2", func(s *Sample) { s.ConfigIndex = 2 }, false},
		{"a day-long step", func(s *Sample) { s.DurationNS = MaxDurationNS + 1 }, false},
		{"stall beyond bound", func(s *Sample) { s.StallNS = math.MaxInt64 }, false},
		{"reads beyond the model", func(s *Sample) { s.BytesRead = 34 << 20 }, false},
		{"a prefill step reading the model twice over", func(s *Sample) { s.Tokens, s.BytesRead = 16, 66<<20 }, true},
		{"a prefill step reading beyond its tokens", func(s *Sample) { s.Tokens, s.BytesRead = 2, 67<<20 }, false},
		{"cache beyond the model", func(s *Sample) { s.CacheBytes = math.MaxInt64 }, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			s := Sample{ConfigIndex: 1, Phase: PhaseDecode, Tokens: 1, DurationNS: 1e7, StallNS: 1e6, BytesRead: 1 << 20, CacheBytes: 16 << 20}
			c.edit(&s)
			err := testBounds().CheckTelemetry(&TelemetryBatch{Samples: []Sample{s}})
			if (err == nil) != c.ok {
				t.Fatalf("CheckTelemetry = %v, want ok=%v", err, c.ok)
			}
		})
	}
	if err := testBounds().CheckTelemetry(&TelemetryBatch{Experts: []ExpertLoad{{ConfigIndex: 5}}}); err == nil {
		t.Fatal("expert load for config 5 of 2 accepted")
	}
}

// FuzzRunBoundsResult: whatever a result's decoder and RunBounds accept
// holds only finite numbers whose sum over any plausible number of rows
// stays finite, so no read over stored results can overflow or produce a
// value JSON cannot carry.
func FuzzRunBoundsResult(f *testing.F) {
	ok, _ := Encode(&Result{RunID: 1, Token: 1, DeviceID: "d", Outcome: OutcomeSucceeded, Configs: []ConfigResult{goodConfig()}})
	f.Add(ok)
	f.Add([]byte(`{"v":1,"run_id":1,"token":1,"device_id":"d","outcome":"succeeded","configs":[{"config_index":0,"config_key":"resident","decode_tps":{"mean":1e308}}]}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		res, err := DecodeResult(data)
		if err != nil || testBounds().CheckResult(res) != nil {
			return
		}
		for _, c := range res.Configs {
			vals := []float64{c.HitRate, c.PredictorPrecision, c.PredictorRecall, c.StallFraction, c.BytesPerToken}
			for _, st := range []Stat{c.DecodeTPS, c.PrefillTPS, c.TTFTMS} {
				vals = append(vals, st.Mean, st.Median, st.Stddev, st.CV, st.Min, st.Max)
			}
			for _, v := range c.Extra {
				vals = append(vals, v)
			}
			for _, v := range vals {
				if !Finite(v) || !Finite(v*1e9) || !Finite(v*v) {
					t.Fatalf("accepted %v: a sum over 1e9 rows or a square overflows", v)
				}
			}
		}
	})
}
