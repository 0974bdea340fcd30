package protocol

import (
	"fmt"
	"math"

	"github.com/lesfarm/lesfarm/jobs"
)

// Physical bounds of measured values. Validate checks a message's shape;
// RunBounds checks its values against what a device can measure and
// against the run's assignment, at the coordinator's boundary (ingest), so
// no stored row can be non-finite, negative where a rate or a time cannot
// be, or so large that an aggregate over it overflows.
const (
	// MaxTokensPerSecond bounds a throughput statistic (tok/s).
	MaxTokensPerSecond = 1e7
	// MaxMillis bounds a time statistic in milliseconds (11.6 days).
	MaxMillis = 1e9
	// MaxDurationNS bounds a sample's durations (MaxMillis in ns).
	MaxDurationNS = int64(MaxMillis * 1e6)
	// MaxMeasuredBytes bounds byte counts when the model's size is unknown
	// (1 PiB).
	MaxMeasuredBytes = int64(1) << 50
	// MaxCV bounds a coefficient of variation.
	MaxCV = 1e6
	// MaxExtra bounds the magnitude of an extra metric.
	MaxExtra = 1e12
	// MaxStatN bounds a statistic's repetition count.
	MaxStatN = 1 << 20
)

// RunBounds is what a run's results and telemetry are checked against:
// its assignment's configs and, when known, its model's size.
type RunBounds struct {
	// Configs is the run's expanded config list (Assignment.Configs).
	Configs []jobs.Config
	// ModelBytes is the model file's size; 0 when unknown. A step cannot
	// read more expert bytes than the model holds.
	ModelBytes int64
}

func (b *RunBounds) maxBytes() int64 {
	if b.ModelBytes > 0 {
		return b.ModelBytes
	}
	return MaxMeasuredBytes
}

// inRange reports whether v is finite and within [lo, hi] (NaN is not).
func inRange(v, lo, hi float64) bool { return v >= lo && v <= hi }

func checkStatRange(field string, st *Stat, hi float64) error {
	if st.N < 0 || st.N > MaxStatN {
		return fmt.Errorf("%s.n %d out of range [0, %d]", field, st.N, MaxStatN)
	}
	for _, f := range []struct {
		name string
		v    float64
	}{{"mean", st.Mean}, {"median", st.Median}, {"stddev", st.Stddev}, {"min", st.Min}, {"max", st.Max}} {
		if !inRange(f.v, 0, hi) {
			return fmt.Errorf("%s.%s %v out of range [0, %g]", field, f.name, f.v, hi)
		}
	}
	if !inRange(st.CV, 0, MaxCV) {
		return fmt.Errorf("%s.cv %v out of range [0, %g]", field, st.CV, MaxCV)
	}
	return nil
}

// CheckResult checks a result's configs against the run: each names a
// config of the assignment by index and key, and every value is finite and
// physically possible (no negative rate or time, fractions in [0, 1],
// throughput at most MaxTokensPerSecond, times at most MaxMillis, bytes
// per token at most the model's size). The error names the first field
// that fails.
func (b *RunBounds) CheckResult(res *Result) error {
	for k := range res.Configs {
		c := &res.Configs[k]
		at := fmt.Sprintf("configs[%d]", k)
		if c.ConfigIndex < 0 || c.ConfigIndex >= len(b.Configs) {
			return fmt.Errorf("%s.config_index %d: the run has %d configs", at, c.ConfigIndex, len(b.Configs))
		}
		if want := b.Configs[c.ConfigIndex].Key; c.ConfigKey != want {
			return fmt.Errorf("%s.config_key %q: config %d of the run is %q", at, clip(c.ConfigKey), c.ConfigIndex, want)
		}
		if err := checkStatRange(at+".decode_tps", &c.DecodeTPS, MaxTokensPerSecond); err != nil {
			return err
		}
		if err := checkStatRange(at+".prefill_tps", &c.PrefillTPS, MaxTokensPerSecond); err != nil {
			return err
		}
		if err := checkStatRange(at+".ttft_ms", &c.TTFTMS, MaxMillis); err != nil {
			return err
		}
		for _, f := range []struct {
			name string
			v    float64
		}{{"hit_rate", c.HitRate}, {"predictor_precision", c.PredictorPrecision}, {"predictor_recall", c.PredictorRecall}, {"stall_fraction", c.StallFraction}} {
			if !inRange(f.v, 0, 1) {
				return fmt.Errorf("%s.%s %v out of range [0, 1]", at, f.name, f.v)
			}
		}
		if !inRange(c.BytesPerToken, 0, float64(b.maxBytes())) {
			return fmt.Errorf("%s.bytes_per_token %v out of range [0, %d]", at, c.BytesPerToken, b.maxBytes())
		}
		if c.PeakMemoryBytes < 0 || c.PeakMemoryBytes > MaxMeasuredBytes {
			return fmt.Errorf("%s.peak_memory_bytes %d out of range [0, %d]", at, c.PeakMemoryBytes, MaxMeasuredBytes)
		}
		for name, v := range c.Extra {
			if !inRange(v, -MaxExtra, MaxExtra) {
				return fmt.Errorf("%s.extra.%s %v out of range [%g, %g]", at, clip(name), v, -MaxExtra, MaxExtra)
			}
		}
	}
	return nil
}

// CheckTelemetry checks a telemetry batch's samples against the run: each
// names a config of the assignment, its durations are at most
// MaxDurationNS, its cache at most the model's size, and the bytes it read
// at most the model's size per token of the step (a prefill step with a
// small cache evicts and reads experts again for later tokens).
func (b *RunBounds) CheckTelemetry(tb *TelemetryBatch) error {
	limit := b.maxBytes()
	for k := range tb.Samples {
		s := &tb.Samples[k]
		switch {
		case s.ConfigIndex < 0 || s.ConfigIndex >= len(b.Configs):
			return fmt.Errorf("samples[%d].cfg %d: the run has %d configs", k, s.ConfigIndex, len(b.Configs))
		case s.DurationNS < 0 || s.DurationNS > MaxDurationNS || s.StallNS < 0 || s.StallNS > MaxDurationNS:
			return fmt.Errorf("samples[%d]: dur_ns %d or stall_ns %d out of range [0, %d]", k, s.DurationNS, s.StallNS, MaxDurationNS)
		case s.CacheBytes < 0 || s.CacheBytes > limit:
			return fmt.Errorf("samples[%d]: cache_bytes %d out of range [0, %d]", k, s.CacheBytes, limit)
		case s.BytesRead < 0 || s.BytesRead/int64(max(s.Tokens, 1)) > limit:
			return fmt.Errorf("samples[%d]: bytes_read %d out of range [0, %d per token x %d tokens]", k, s.BytesRead, limit, s.Tokens)
		}
	}
	for k, e := range tb.Experts {
		if e.ConfigIndex < 0 || e.ConfigIndex >= len(b.Configs) {
			return fmt.Errorf("experts[%d].cfg %d: the run has %d configs", k, e.ConfigIndex, len(b.Configs))
		}
	}
	return nil
}

// Finite reports whether v is neither NaN nor ±Inf: for readers that must
// not hand a non-finite number to a JSON encoder.
func Finite(v float64) bool { return !math.IsNaN(v) && !math.IsInf(v, 0) }
