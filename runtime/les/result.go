package les

import (
	"time"

	"github.com/lesfarm/lesfarm/runtime/expert"
	"github.com/lesfarm/lesfarm/runtime/stat"
)

// Result is what a configuration measured over its repetitions. Every
// metric is defined here once; its comment states its phase and formula.
// Rates and times are summarised over repetitions (one value per
// repetition, so each carries its CV and N); the LES counters are ratios of
// sums over all kept repetitions. The decode phase of a prompt runs from
// its first sampled token to its last; the prefill phase before it.
type Result struct {
	// Repetitions is the number of measured repetitions the figures use;
	// Discarded how many more were measured and dropped as outliers
	// (DiscardOutliers); Warmup how many unmeasured ones ran before.
	Repetitions, Discarded, Warmup int
	// DecodeTPS (decode phase) is, per repetition, decoded tokens / decode
	// time: Σ DecodeTokens / Σ Decode over the prompts, where decode time
	// is the device's in device time (DeviceTime), else the wall time of
	// the decode forward passes.
	DecodeTPS stat.Summary
	// PrefillTPS (prefill phase) is, per repetition, prompt tokens /
	// prefill time, summed over the prompts, where prefill time is the
	// device's in device time (Rep.Prefill), else the wall time of the
	// prefill forward passes.
	PrefillTPS stat.Summary
	// TTFTMS (prefill phase) is, per repetition, the mean over prompts of
	// the time from the start of the prompt's prefill to its first sampled
	// token, in milliseconds: the device's in device time, else the host's
	// wall clock.
	TTFTMS stat.Summary
	// HitRate (decode phase) is Σ hits / Σ demanded experts; 1 when every
	// expert is resident.
	HitRate float64
	// PredictorPrecision (decode phase) is Σ |predicted ∩ demanded| /
	// Σ |predicted| over the layers with a lookahead prediction; 0 without
	// one.
	PredictorPrecision float64
	// PredictorRecall (decode phase) is Σ |predicted ∩ demanded| /
	// Σ |demanded| over the same layers; 0 without a prediction.
	PredictorRecall float64
	// StallFraction (decode phase) is Σ stall / Σ decode time, at most 1:
	// in device time the device's stall (expert waits outside compute on
	// the device clock) over device decode time, else the host's time in
	// Use waiting on reads over the decode wall time.
	StallFraction float64
	// BytesPerToken (decode phase) is Σ expert bytes read / Σ decoded
	// tokens; prefill reads are not counted (PrefillBytesPerToken).
	BytesPerToken float64
	// PrefillBytesPerToken (prefill phase) is Σ expert bytes read during
	// prefill / Σ prompt tokens.
	PrefillBytesPerToken float64
	// DecodeTokens is Σ decoded tokens over the kept repetitions.
	DecodeTokens int
	// PeakRSSBytes is the session's peak RSS (Session.PeakRSS) when the
	// result was taken.
	PeakRSSBytes int64
	// DeviceTime reports whether decode and prefill figures are device
	// time.
	DeviceTime bool
	// DeviceTimeFields audit a device-time result (all zero in host time).
	DeviceTimeFields
	// Expert is the store's decode-phase counters summed over the kept
	// repetitions (zero without a store).
	Expert expert.Stats
	// Resident is true when no store streamed experts.
	Resident bool
}

// DeviceTimeFields audit a device-time result (decode phase): the dilation
// (host seconds per device second of compute, Σ host compute / Σ device
// compute) and the compute time per decoded token on the host (busy work
// of a slowdown included) and on the device (Σ compute / Σ decoded
// tokens, in ms). All zero in host time.
type DeviceTimeFields struct {
	Dilation                float64 `json:"dilation,omitempty"`
	HostComputeMSPerToken   float64 `json:"host_compute_ms_per_token,omitempty"`
	DeviceComputeMSPerToken float64 `json:"device_compute_ms_per_token,omitempty"`
}

// MeasureOptions configure Measure.
type MeasureOptions struct {
	// DiscardOutliers drops the repetitions whose decode tok/s is an
	// outlier by stat.Outliers (beyond median ± 3·1.4826·MAD, with at
	// least 3 repetitions and a non-zero MAD) before any metric is taken.
	DiscardOutliers bool
	Warmup          int  // recorded in Result.Warmup
	Resident        bool // no store: HitRate is 1
}

// Measure computes the Result of reps.
func Measure(reps []Rep, o MeasureOptions) Result {
	res := Result{Warmup: o.Warmup, Resident: o.Resident}
	if o.DiscardOutliers {
		out, n := stat.Outliers(perRep(reps, DecodeTPS), 0)
		if n > 0 {
			kept := make([]Rep, 0, len(reps)-n)
			for i, r := range reps {
				if !out[i] {
					kept = append(kept, r)
				}
			}
			reps, res.Discarded = kept, n
		}
	}
	res.Repetitions = len(reps)
	res.DecodeTPS = stat.Summarize(perRep(reps, DecodeTPS))
	res.PrefillTPS = stat.Summarize(perRep(reps, PrefillTPS))
	res.TTFTMS = stat.Summarize(perRep(reps, TTFTMS))
	var decode time.Duration
	var promptTokens int
	var prefill expert.Stats
	for _, r := range reps {
		res.Expert.Add(r.Expert)
		prefill.Add(r.PrefillExpert)
		decode += r.Decode
		res.DecodeTokens += r.DecodeTokens
		promptTokens += r.PromptTokens
		res.DeviceTime = res.DeviceTime || r.DeviceTime
	}
	st := res.Expert
	if o.Resident {
		res.HitRate = 1
	} else {
		res.HitRate = HitRate(st)
	}
	pred := st.Prediction()
	res.PredictorPrecision, res.PredictorRecall = pred.Precision(), pred.Recall()
	res.StallFraction = StallFraction(st, decode, res.DeviceTime)
	res.BytesPerToken = perToken(st.BytesRead, res.DecodeTokens)
	res.PrefillBytesPerToken = perToken(prefill.BytesRead, promptTokens)
	if res.DeviceTime {
		res.DeviceTimeFields = deviceFields(st, res.DecodeTokens)
	}
	return res
}

// DecodeTPS is one repetition's decode tok/s: DecodeTokens / Decode.
func DecodeTPS(r Rep) float64 {
	if r.Decode <= 0 {
		return 0
	}
	return float64(r.DecodeTokens) / r.Decode.Seconds()
}

// PrefillTPS is one repetition's prefill tok/s: PromptTokens / Prefill.
func PrefillTPS(r Rep) float64 {
	if r.Prefill <= 0 {
		return 0
	}
	return float64(r.PromptTokens) / r.Prefill.Seconds()
}

// TTFTMS is one repetition's mean time to first token in ms: TTFT /
// Prompts.
func TTFTMS(r Rep) float64 {
	if r.Prompts == 0 {
		return 0
	}
	return r.TTFT.Seconds() * 1e3 / float64(r.Prompts)
}

// HitRate is hits / demanded experts of the counters st.
func HitRate(st expert.Stats) float64 { return st.HitRate() }

// StallFraction is the stall share of a phase that took d: the device's
// stall over d in device time, else the host's stall over d; at most 1.
func StallFraction(st expert.Stats, d time.Duration, deviceTime bool) float64 {
	if d <= 0 {
		return 0
	}
	stall := st.Stall
	if deviceTime {
		stall = st.DeviceStall
	}
	return min(stall.Seconds()/d.Seconds(), 1)
}

func perToken(bytes int64, tokens int) float64 {
	if tokens == 0 {
		return 0
	}
	return float64(bytes) / float64(tokens)
}

func deviceFields(st expert.Stats, tokens int) DeviceTimeFields {
	if st.DeviceCompute <= 0 || tokens == 0 {
		return DeviceTimeFields{}
	}
	return DeviceTimeFields{
		Dilation:                st.Dilation(),
		HostComputeMSPerToken:   st.HostCompute.Seconds() * 1e3 / float64(tokens),
		DeviceComputeMSPerToken: st.DeviceCompute.Seconds() * 1e3 / float64(tokens),
	}
}

func perRep(reps []Rep, f func(Rep) float64) []float64 {
	xs := make([]float64, len(reps))
	for i, r := range reps {
		xs[i] = f(r)
	}
	return xs
}
