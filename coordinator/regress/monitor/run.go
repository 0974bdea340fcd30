package monitor

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/lesfarm/lesfarm/coordinator/regress"
	"github.com/lesfarm/lesfarm/coordinator/store"
)

// ObserveRun feeds a finished run's committed results to Observe. The
// coordinator's ingest reporter calls it from Finished, after the commit
// (ingest.Reporter; coordinator/report.go).
//
// Each valid, error-free config result becomes observations of decode and
// prefill tok/s, TTFT (with their repetitions' stddev and count), peak
// memory and the LES metrics (hit rate, predictor recall, stall fraction,
// bytes per token, and per-layer metrics in the result's extras named like
// "predictor_recall.l12"). Zero values mean "not measured" and are skipped.
// Runs that did not succeed are ignored, and so are the runs of A/B
// comparisons (gates and bisection steps). The observations' series are keyed
// by the run's build lineage (see Config.Lineage), so a release branch's
// builds are compared with each other, never with main's.
func (m *Monitor) ObserveRun(ctx context.Context, run *store.Run) ([]*store.AlertGroup, error) {
	if run == nil || run.State != store.RunSucceeded {
		return nil, nil
	}
	// A/B gate and bisection runs (ab_runs) are stored like any run but
	// measure chosen builds side by side, out of the lineage's order:
	// they never become series points (docs/ab.md, docs/bisect.md).
	if in, err := m.cfg.Store.RunInComparison(ctx, run.ID); err != nil || in {
		return nil, err
	}
	results, err := m.cfg.Store.ListResults(ctx, &store.ListResultsParams{RunID: run.ID, Limit: 1000})
	if err != nil {
		return nil, fmt.Errorf("regress monitor: results of run %d: %w", run.ID, err)
	}
	platform := ""
	if dev, err := m.cfg.Store.GetDevice(ctx, run.DeviceID); err == nil {
		platform = dev.Platform
	}
	obs := ObservationsFromResults(run, m.lineage(run), platform, results)
	groups, err := m.Observe(ctx, obs)
	if err != nil {
		m.log.ErrorContext(ctx, "regress: observe run", "run_id", run.ID, "err", err)
	}
	return groups, err
}

// lineage is the build lineage of run's series: Config.Lineage's answer,
// else the run's own, else store.DefaultLineage.
func (m *Monitor) lineage(run *store.Run) string {
	if m.cfg.Lineage != nil {
		if l := m.cfg.Lineage(run); l != "" {
			return l
		}
	}
	if run.Lineage != "" {
		return run.Lineage
	}
	return store.DefaultLineage
}

// RunSeq is the series position of a run: its trigger id, so the runs one
// trigger fans out to every device share a seq and line up across
// devices; the run id when the run has no trigger.
func RunSeq(run *store.Run) int64 {
	if run.TriggerID > 0 {
		return run.TriggerID
	}
	return run.ID
}

// OSMajor formats a platform and OS version as the series' OS field:
// ("android", "14.1.2") → "android 14"; a version that already names the
// platform ("iOS 18.1") is used as is, lower-cased, up to its major.
func OSMajor(platform, version string) string {
	v := strings.ToLower(strings.TrimSpace(version))
	p := strings.ToLower(strings.TrimSpace(platform))
	if p != "" && strings.HasPrefix(v, p) {
		v = strings.TrimSpace(strings.TrimPrefix(v, p))
	}
	if i := strings.IndexAny(v, ". "); i >= 0 {
		v = v[:i]
	}
	return strings.TrimSpace(p + " " + v)
}

// ObservationsFromResults converts a run's results into observations; see
// ObserveRun.
func ObservationsFromResults(run *store.Run, lineage, platform string, results []store.Result) []Observation {
	var out []Observation
	for _, r := range results {
		if !r.Valid || r.Error != "" {
			continue
		}
		key := regress.SeriesKey{Suite: r.Suite, Config: r.ConfigKey, DeviceModel: r.DeviceModel,
			OSMajor: OSMajor(platform, r.OSVersion), Lineage: lineage, Emulated: r.Emulated}
		add := func(metric string, value, stddev float64) {
			if value == 0 {
				return
			}
			k := key
			k.Metric = metric
			n := r.Repetitions
			if stddev == 0 {
				n = 0
			}
			out = append(out, Observation{Key: k, Seq: RunSeq(run), RunKey: fmt.Sprint(run.ID), Build: r.Build,
				Value: value, Stddev: stddev, N: n})
		}
		add(regress.MetricDecodeTPS, r.DecodeTPS.Mean, r.DecodeTPS.Stddev)
		add(regress.MetricPrefillTPS, r.PrefillTPS.Mean, r.PrefillTPS.Stddev)
		add(regress.MetricTTFT, r.TTFTms.Mean, r.TTFTms.Stddev)
		add(regress.MetricPeakMemory, float64(r.PeakMemory), 0)
		add(regress.MetricHitRate, r.HitRate, 0)
		add(regress.MetricPredictorRecall, r.Recall, 0)
		add(regress.MetricStallFraction, r.StallFraction, 0)
		add(regress.MetricBytesPerToken, r.BytesPerToken, 0)
		for name, v := range extras(r) {
			if base, layer := regress.SplitMetric(name); layer >= 0 && regress.IsLESMetric(base) {
				add(fmt.Sprintf("%s.l%d", base, layer), v, 0)
			}
		}
	}
	return out
}

// extras returns the extra metrics stored with a result (the "extra"
// object of its stats).
func extras(r store.Result) map[string]float64 {
	if len(r.Stats) == 0 {
		return nil
	}
	var s struct {
		Extra map[string]float64 `json:"extra"`
	}
	if json.Unmarshal(r.Stats, &s) != nil {
		return nil
	}
	return s.Extra
}
