package regress

import (
	"fmt"
	"strconv"
	"strings"
)

// Metric names used by lesfarm results. A metric may carry a per-layer
// suffix, "predictor_recall.l12", for LES metrics measured per layer.
const (
	MetricDecodeTPS       = "decode_tps"
	MetricPrefillTPS      = "prefill_tps"
	MetricTTFT            = "ttft_ms"
	MetricPeakMemory      = "peak_memory_bytes"
	MetricHitRate         = "hit_rate"
	MetricPredictorRecall = "predictor_recall"
	MetricStallFraction   = "stall_fraction"
	MetricBytesPerToken   = "bytes_per_token"
)

// metricInfo describes one known metric.
type metricInfo struct {
	higherIsBetter bool
	les            bool   // an LES mechanism metric, used for attribution
	label          string // human label in summaries
}

var metrics = map[string]metricInfo{
	MetricDecodeTPS:       {higherIsBetter: true, label: "decode"},
	MetricPrefillTPS:      {higherIsBetter: true, label: "prefill"},
	MetricTTFT:            {higherIsBetter: false, label: "TTFT"},
	MetricPeakMemory:      {higherIsBetter: false, label: "peak memory"},
	MetricHitRate:         {higherIsBetter: true, les: true, label: "hit rate"},
	MetricPredictorRecall: {higherIsBetter: true, les: true, label: "predictor recall"},
	MetricStallFraction:   {higherIsBetter: false, les: true, label: "stall fraction"},
	MetricBytesPerToken:   {higherIsBetter: false, les: true, label: "bytes per token"},
}

// metricAliases maps common spellings to the canonical metric names.
var metricAliases = map[string]string{
	"decode_tok_s": MetricDecodeTPS, "decode": MetricDecodeTPS, "tok/s": MetricDecodeTPS, "tps": MetricDecodeTPS,
	"prefill_tok_s": MetricPrefillTPS, "prefill": MetricPrefillTPS,
	"ttft": MetricTTFT, "ttft_s": MetricTTFT, "time_to_first_token": MetricTTFT,
	"peak_memory": MetricPeakMemory, "peak_mem": MetricPeakMemory, "peak_rss_bytes": MetricPeakMemory,
	"hitrate": MetricHitRate, "cache_hit_rate": MetricHitRate,
	"recall": MetricPredictorRecall, "prediction_recall": MetricPredictorRecall,
	"stall": MetricStallFraction, "stall_share": MetricStallFraction,
	"bytes_per_tok": MetricBytesPerToken,
}

// SplitMetric splits a metric name into its canonical base name and its
// layer (-1 when the metric is not per layer): "recall.l12" → ("predictor_recall", 12).
func SplitMetric(name string) (base string, layer int) {
	base, layer = strings.ToLower(strings.TrimSpace(name)), -1
	if i := strings.LastIndex(base, ".l"); i > 0 {
		if n, err := strconv.Atoi(base[i+2:]); err == nil && n >= 0 {
			base, layer = base[:i], n
		}
	}
	if c, ok := metricAliases[base]; ok {
		base = c
	}
	return base, layer
}

// HigherIsBetter reports whether larger values of metric are improvements.
// known is false for metrics lesfarm does not know; callers then choose.
func HigherIsBetter(metric string) (higher, known bool) {
	base, _ := SplitMetric(metric)
	info, ok := metrics[base]
	return info.higherIsBetter, ok
}

// IsLESMetric reports whether metric is an LES mechanism metric (hit rate,
// predictor recall, stall fraction, bytes per token), per layer or not.
func IsLESMetric(metric string) bool {
	base, _ := SplitMetric(metric)
	return metrics[base].les
}

// metricLabel returns the human label of metric, e.g. "decode".
func metricLabel(metric string) string {
	base, _ := SplitMetric(metric)
	if info, ok := metrics[base]; ok {
		return info.label
	}
	return base
}

// KnownMetrics returns the canonical names of the metrics lesfarm knows
// and whether higher is better for each, for help texts.
func KnownMetrics() string {
	var b strings.Builder
	for _, m := range []string{MetricDecodeTPS, MetricPrefillTPS, MetricTTFT, MetricPeakMemory, MetricHitRate, MetricPredictorRecall, MetricStallFraction, MetricBytesPerToken} {
		dir := "lower is better"
		if metrics[m].higherIsBetter {
			dir = "higher is better"
		}
		fmt.Fprintf(&b, "  %-18s %s\n", m, dir)
	}
	return b.String()
}
