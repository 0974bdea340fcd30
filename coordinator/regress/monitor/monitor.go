// Package monitor runs regression detection inside the coordinator: it
// records each new result as a point of its series (coordinator/store),
// runs the detector (coordinator/regress) on the series' recent history,
// turns new change points into alerts grouped across devices and metrics,
// attributes throughput changes to LES metrics, and delivers webhook
// notifications with retry from a Postgres outbox.
//
// The coordinator's ingest calls Observe after it commits a run's results;
// Start runs the webhook delivery loop until Stop. A Monitor is safe for
// concurrent use and keeps no state of its own: several coordinators can
// run one each against the same database.
package monitor

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net/http"
	"sort"
	"time"

	"github.com/lesfarm/lesfarm/coordinator/regress"
	"github.com/lesfarm/lesfarm/coordinator/startstop"
	"github.com/lesfarm/lesfarm/coordinator/store"
)

// Observation is one result value of one series, e.g. a run's mean decode
// tok/s with the standard deviation and count of its repetitions.
type Observation struct {
	Key    regress.SeriesKey
	Seq    int64  // build sequence (or time) of the run
	RunKey string // the run's id; a rerun at the same Seq has another RunKey
	Build  string // build name, for messages
	Value  float64
	Stddev float64 // 0 when unknown
	N      int     // repetitions; 0 when unknown
}

// RerunRequest asks for a confirmation rerun of a suite configuration on
// one kind of device at one build, before an alert group is notified.
type RerunRequest struct {
	GroupID int64
	Key     regress.SeriesKey
	Seq     int64
	Build   string
}

// Config configures a Monitor. Store is required; its pool needs at least
// two connections (group classification reads while the alert
// transaction holds one).
type Config struct {
	Store    *store.Store
	Detector regress.Config
	Logger   *slog.Logger
	// Tolerance is how many seq units a change point may move between
	// evaluations and still be the same alert, and how close changes of
	// one suite must be to share a group (default 4, the evaluation
	// harness's merge window).
	Tolerance int64
	// RequestRerun schedules a confirmation rerun for suites whose policy
	// asks for one; nil means reruns cannot be scheduled and such groups
	// wait for the next regular result of the series.
	RequestRerun func(ctx context.Context, r RerunRequest) error
	// HTTPClient sends webhooks (default: 10 s timeout).
	HTTPClient *http.Client
	// PollInterval is how often the webhook loop looks for due deliveries
	// (default 1 s).
	PollInterval time.Duration
	// RetryBase is the first retry delay; it doubles per attempt up to
	// RetryMax (defaults 2 s and 10 min).
	RetryBase, RetryMax time.Duration
	// MaxAttempts bounds webhook attempts before a delivery fails for good
	// (default 8).
	MaxAttempts int
	// LESAlerts makes change points of LES metrics (hit rate, predictor
	// recall, stall fraction, bytes per token) alerts of their own. By
	// default they only serve as attribution of headline alerts (tok/s,
	// TTFT, peak memory): a run reports tens of per-layer LES series, and
	// alerting on each multiplies false alerts while telling users nothing
	// the attribution does not.
	LESAlerts bool
	// Lineage, when set, overrides the build lineage a finished run's
	// observations are filed under; nil or "" uses the lineage the run
	// records (store.Run.Lineage, set by its trigger), and "main" for a run
	// without one.
	Lineage func(run *store.Run) string
	// PoolSiblings is how many sibling series (the same metric, device
	// model, OS and emulation; other configs, suites and lineages) lend
	// the detector their noise level (regress.DetectPooled) when a series
	// is analysed (default regress.DefaultPoolSiblings, 16; negative: each
	// series on its own noise). The offline `regress detect` pools the
	// same siblings (regress.Pool, store.RegressSiblingsOf).
	PoolSiblings int
}

// Monitor is the coordinator's regression detector; see the package doc.
type Monitor struct {
	cfg  Config
	log  *slog.Logger
	wake chan struct{}
	ss   startstop.Service
	// noise memoizes each sibling's noise estimate (siblingNoise).
	noise siblingNoiseCache
}

// New validates cfg and returns a Monitor. cfg must not be reused.
func New(cfg Config) (*Monitor, error) {
	if cfg.Store == nil {
		return nil, errors.New("regress monitor: Store is required")
	}
	if err := cfg.Detector.Validate(); err != nil {
		return nil, fmt.Errorf("regress monitor: %w", err)
	}
	cfg.Tolerance = cmp.Or(cfg.Tolerance, 4)
	cfg.PollInterval = cmp.Or(cfg.PollInterval, time.Second)
	cfg.RetryBase = cmp.Or(cfg.RetryBase, 2*time.Second)
	cfg.RetryMax = cmp.Or(cfg.RetryMax, 10*time.Minute)
	cfg.MaxAttempts = cmp.Or(cfg.MaxAttempts, 8)
	cfg.PoolSiblings = cmp.Or(cfg.PoolSiblings, regress.DefaultPoolSiblings)
	if cfg.HTTPClient == nil {
		cfg.HTTPClient = &http.Client{Timeout: 10 * time.Second}
	}
	log := cfg.Logger
	if log == nil {
		log = slog.Default()
	}
	return &Monitor{cfg: cfg, log: log, wake: make(chan struct{}, 1)}, nil
}

func keyOf(s store.RegressSeries) regress.SeriesKey {
	return regress.SeriesKey{Suite: s.Suite, Config: s.Config, Metric: s.Metric, DeviceModel: s.DeviceModel,
		OSMajor: s.OSMajor, Lineage: s.Lineage, Emulated: s.Emulated}
}

func seriesOf(k regress.SeriesKey) store.RegressSeries {
	return store.RegressSeries{Suite: k.Suite, Config: k.Config, Metric: k.Metric, DeviceModel: k.DeviceModel,
		OSMajor: k.OSMajor, Lineage: k.Lineage, Emulated: k.Emulated}
}

// Observe records observations (typically one run's results) and runs
// detection on every series they touch. It returns the alert groups that
// received new alerts. Replaying the same observations is harmless.
func (m *Monitor) Observe(ctx context.Context, obs []Observation) ([]*store.AlertGroup, error) {
	if len(obs) == 0 {
		return nil, nil
	}
	params := make([]store.AddRegressPointParams, len(obs))
	for i, o := range obs {
		if math.IsNaN(o.Value) || math.IsInf(o.Value, 0) {
			return nil, fmt.Errorf("regress monitor: observation %d (%s): value is not finite", i, o.Key)
		}
		params[i] = store.AddRegressPointParams{Series: seriesOf(o.Key), Point: store.RegressPoint{
			Seq: o.Seq, RunKey: o.RunKey, Value: o.Value, Stddev: max(o.Stddev, 0), N: max(o.N, 0), Build: o.Build}}
	}
	ids, err := m.cfg.Store.AddRegressPoints(ctx, params)
	if err != nil {
		return nil, fmt.Errorf("regress monitor: %w", err)
	}
	seen := map[int64]bool{}
	// Group new change points by (suite, lineage) and seq so one build's
	// changes on several series land in one transaction.
	var groups []*store.AlertGroup
	var errs []error
	for i, id := range ids {
		if seen[id] {
			continue
		}
		seen[id] = true
		if !m.cfg.LESAlerts && regress.IsLESMetric(obs[i].Key.Metric) {
			continue
		}
		g, err := m.analyse(ctx, id, obs[i])
		if err != nil {
			errs = append(errs, err)
			continue
		}
		groups = append(groups, g...)
	}
	if len(groups) > 0 {
		select {
		case m.wake <- struct{}{}:
		default:
		}
	}
	return dedupGroups(groups), errors.Join(errs...)
}

func dedupGroups(gs []*store.AlertGroup) []*store.AlertGroup {
	byID := map[int64]*store.AlertGroup{}
	for _, g := range gs {
		byID[g.ID] = g // later snapshots are more complete
	}
	out := make([]*store.AlertGroup, 0, len(byID))
	for _, g := range byID {
		out = append(out, g)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out
}

// points loads the detector's window of a series.
func (m *Monitor) points(ctx context.Context, seriesID int64) ([]regress.Point, error) {
	win := m.cfg.Detector.Window
	if win == 0 {
		win = 120
	}
	ps, err := m.cfg.Store.RegressPoints(ctx, seriesID, math.MinInt64, math.MaxInt64, win)
	if err != nil {
		return nil, err
	}
	return toPoints(ps), nil
}

// analyse runs detection on one series and records its new change points.
func (m *Monitor) analyse(ctx context.Context, seriesID int64, o Observation) ([]*store.AlertGroup, error) {
	key := o.Key
	higher, known := regress.HigherIsBetter(key.Metric)
	if !known {
		higher = true
	}
	pts, err := m.points(ctx, seriesID)
	if err != nil {
		return nil, fmt.Errorf("regress monitor: load %s: %w", key, err)
	}
	prior, err := m.siblingNoise(ctx, seriesID, higher)
	if err != nil {
		return nil, fmt.Errorf("regress monitor: sibling noise of %s: %w", key, err)
	}
	cps, err := regress.DetectPooled(pts, higher, m.cfg.Detector, prior)
	if err != nil {
		return nil, err
	}
	if err := m.resolveConfirmations(ctx, seriesID, cps, o); err != nil {
		return nil, err
	}
	var out []*store.AlertGroup
	for _, cp := range cps {
		g, err := m.record(ctx, seriesID, key, cp, o)
		if err != nil {
			return out, fmt.Errorf("regress monitor: record %s@%d: %w", key, cp.Seq, err)
		}
		if g != nil {
			out = append(out, g)
		}
	}
	return out, nil
}

// record turns one change point into an alert (if new), with attribution.
func (m *Monitor) record(ctx context.Context, seriesID int64, key regress.SeriesKey, cp regress.ChangePoint, o Observation) (*store.AlertGroup, error) {
	siblings, err := m.cfg.Store.ListRegressSeries(ctx, key.Suite, key.Lineage, key.Config)
	if err != nil {
		return nil, err
	}
	var attrs []regress.Attribution
	if !regress.IsLESMetric(key.Metric) {
		sib := map[string][]regress.Point{}
		for _, s := range siblings {
			sk := keyOf(s)
			if s.ID == seriesID || sk.Metric == key.Metric || !regress.IsLESMetric(sk.Metric) ||
				sk.DeviceModel != key.DeviceModel || sk.OSMajor != key.OSMajor || sk.Emulated != key.Emulated {
				continue
			}
			if sib[sk.Metric], err = m.points(ctx, s.ID); err != nil {
				return nil, err
			}
		}
		attrs = regress.Attribute(cp, sib)
	}
	attrJSON, _ := json.Marshal(attrs)
	if attrs == nil {
		attrJSON = []byte("[]")
	}
	alert := store.NewAlert{SeriesID: seriesID, Seq: cp.Seq, Direction: string(cp.Direction), RelativeChange: cp.RelativeChange,
		PValue: cp.PValue, BeforeMean: cp.BeforeMean, AfterMean: cp.AfterMean, BeforeN: cp.BeforeN, AfterN: cp.AfterN,
		LastGoodSeq: cp.LastGoodSeq, FirstBadSeq: cp.FirstBadSeq, Attribution: attrJSON, Summary: regress.Summarize(regress.Headline(key.Metric, cp, key.DeviceModel), attrs)}
	res, err := m.cfg.Store.RecordAlerts(ctx, &store.RecordAlertsParams{
		Suite: key.Suite, Lineage: key.Lineage, Seq: cp.Seq, Build: buildAt(o, cp), Tolerance: m.cfg.Tolerance,
		Alerts: []store.NewAlert{alert},
		Classify: func(g *store.AlertGroup) store.GroupClassification {
			return m.classify(ctx, g, siblings)
		},
	})
	if err != nil || res.Group == nil || res.Inserted == 0 {
		return nil, err
	}
	g := res.Group
	m.log.InfoContext(ctx, "regress: alert", "group_id", g.ID, "series", key.String(), "seq", cp.Seq,
		"direction", cp.Direction, "relative_change", cp.RelativeChange, "p_value", cp.PValue, "scope", g.Scope, "new_group", res.Created)
	if res.Created && g.Confirmation == "pending" {
		if m.cfg.RequestRerun == nil {
			m.log.WarnContext(ctx, "regress: confirmation rerun wanted but no scheduler; waiting for the next result", "group_id", g.ID)
		} else if err := m.cfg.RequestRerun(ctx, RerunRequest{GroupID: g.ID, Key: key, Seq: o.Seq, Build: o.Build}); err != nil {
			m.log.ErrorContext(ctx, "regress: request confirmation rerun", "group_id", g.ID, "err", err)
		}
	}
	return g, nil
}

func buildAt(o Observation, cp regress.ChangePoint) string {
	if o.Seq == cp.Seq {
		return o.Build
	}
	return ""
}

// classify computes a group's scope and summary from its alerts. The scope
// is judged on the headline (non-LES) metrics when the group has any.
func (m *Monitor) classify(ctx context.Context, g *store.AlertGroup, siblings []store.RegressSeries) store.GroupClassification {
	headline := false
	for _, a := range g.Alerts {
		headline = headline || !regress.IsLESMetric(a.Series.Metric)
	}
	var affected []regress.SeriesKey
	metricsAffected := map[[2]string]bool{}
	for _, a := range g.Alerts {
		if headline && regress.IsLESMetric(a.Series.Metric) {
			continue
		}
		affected = append(affected, keyOf(a.Series))
		metricsAffected[[2]string{a.Series.Config, a.Series.Metric}] = true
	}
	// Observed: series of the same config and metric with results at or
	// after the change.
	var observed []regress.SeriesKey
	all, err := m.cfg.Store.ListRegressSeries(ctx, g.Suite, g.Lineage, "")
	if err != nil {
		m.log.ErrorContext(ctx, "regress: list series for classification", "err", err)
		all = siblings
	}
	affectedIDs := map[int64]bool{}
	for _, a := range g.Alerts {
		affectedIDs[a.Series.ID] = true
	}
	for _, s := range all {
		if !metricsAffected[[2]string{s.Config, s.Metric}] {
			continue
		}
		ps, err := m.cfg.Store.RegressPoints(ctx, s.ID, g.Seq, math.MaxInt64, 1)
		if err != nil || len(ps) == 0 {
			continue
		}
		observed = append(observed, keyOf(s))
		if affectedIDs[s.ID] {
			continue
		}
		// Not alerted on its own: does the same change show on this
		// series when tested at the group's seq? A change the detector
		// found on one device is weaker evidence to ask for on another.
		if m.corroborates(ctx, s, g) {
			affected = append(affected, keyOf(s))
		}
	}
	scope, detail := regress.Classify(affected, observed)
	// Summary: the alert with the largest headline change, then the others.
	alerts := append([]store.Alert(nil), g.Alerts...)
	sort.SliceStable(alerts, func(i, j int) bool {
		li, lj := regress.IsLESMetric(alerts[i].Series.Metric), regress.IsLESMetric(alerts[j].Series.Metric)
		if li != lj {
			return !li
		}
		return math.Abs(float64(alerts[i].RelativeChange)) > math.Abs(float64(alerts[j].RelativeChange))
	})
	summary := fmt.Sprintf("%s change at %s seq %d: ", scope, g.Suite, g.Seq)
	if len(alerts) > 0 {
		summary += alerts[0].Summary
		if len(alerts) > 1 {
			summary += fmt.Sprintf(" (+%d more alerts)", len(alerts)-1)
		}
	}
	return store.GroupClassification{Scope: string(scope), ScopeDetail: detail, Summary: summary}
}

// corroborates reports whether series s also changed at the group's seq,
// in the direction of the group's alerts on the same metric, by
// regress.TestAt at regress.AttributionAlpha over the last 30 points
// before the change.
func (m *Monitor) corroborates(ctx context.Context, s store.RegressSeries, g *store.AlertGroup) bool {
	want := ""
	for _, a := range g.Alerts {
		if a.Series.Config == s.Config && a.Series.Metric == s.Metric {
			want = a.Direction
			break
		}
	}
	if want == "" {
		return false
	}
	pts, err := m.points(ctx, s.ID)
	if err != nil {
		return false
	}
	higher, known := regress.HigherIsBetter(s.Metric)
	if !known {
		higher = true
	}
	cp, ok := regress.TestAt(pts, g.Seq, 30, 0, higher, regress.AttributionAlpha)
	return ok && string(cp.Direction) == want
}

// resolveConfirmations settles pending confirmations of this series: a
// group is confirmed when the detector still finds its change with the
// newest result (the rerun, or the next regular result) included, and
// refuted otherwise.
func (m *Monitor) resolveConfirmations(ctx context.Context, seriesID int64, cps []regress.ChangePoint, o Observation) error {
	pending, err := m.cfg.Store.PendingConfirmations(ctx, seriesID)
	if err != nil || len(pending) == 0 {
		return err
	}
	for _, a := range pending {
		if o.Seq < a.Seq {
			continue
		}
		ok := false
		for _, cp := range cps {
			ok = ok || (string(cp.Direction) == a.Direction && absI(cp.Seq-a.Seq) <= m.cfg.Tolerance)
		}
		note := ""
		if !ok {
			note = fmt.Sprintf("refuted by the result of run %q at seq %d: the change is no longer significant", o.RunKey, o.Seq)
		}
		if err := m.cfg.Store.ResolveConfirmation(ctx, a.GroupID, ok, note); err != nil {
			return err
		}
		m.log.InfoContext(ctx, "regress: confirmation resolved", "group_id", a.GroupID, "confirmed", ok)
		select {
		case m.wake <- struct{}{}:
		default:
		}
	}
	return nil
}

func absI(x int64) int64 {
	if x < 0 {
		return -x
	}
	return x
}
