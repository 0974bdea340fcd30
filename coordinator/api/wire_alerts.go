package api

import (
	"encoding/json"
	"math"
	"time"

	"github.com/lesfarm/lesfarm/coordinator/store"
)

// Ratio is a relative change. It is infinite when the value before the
// change was 0 (e.g. stall fraction 0 → 0.1); JSON cannot carry that, so it
// is encoded as null there.
type Ratio float64

// MarshalJSON encodes r, with null for a non-finite value.
func (r Ratio) MarshalJSON() ([]byte, error) {
	f := float64(r)
	if math.IsInf(f, 0) || math.IsNaN(f) {
		return []byte("null"), nil
	}
	return json.Marshal(f)
}

// Series identifies one regression series: one metric of one config of a
// suite on one device model, OS major, emulation and build lineage.
type Series struct {
	ID          int64  `json:"id" doc:"Series id." example:"118"`
	Suite       string `json:"suite" doc:"Suite." example:"les-ladder"`
	Config      string `json:"config" doc:"Config key." example:"mode=les,budget=25%"`
	Metric      string `json:"metric" doc:"Metric." example:"decode_tps"`
	DeviceModel string `json:"device_model" doc:"Device model." example:"Pixel 8"`
	OSMajor     string `json:"os_major" doc:"Major OS version." example:"Android 14"`
	Lineage     string `json:"lineage" doc:"Build lineage." example:"main"`
	Emulated    bool   `json:"emulated" doc:"Whether the series comes from emulated devices." example:"false"`
}

func seriesFromStore(s *store.RegressSeries) Series {
	return Series{ID: s.ID, Suite: s.Suite, Config: s.Config, Metric: s.Metric, DeviceModel: s.DeviceModel,
		OSMajor: s.OSMajor, Lineage: s.Lineage, Emulated: s.Emulated}
}

// SeriesPoint is one build's value of a series.
type SeriesPoint struct {
	Seq    int64   `json:"seq" doc:"Series position of the point's run (its trigger id, shared by the runs one trigger fanned out; alerts name it). Points are in build order, not seq order: see build_position." example:"42"`
	RunKey string  `json:"run,omitempty" doc:"Run (or runs) the point was computed from." example:"4812"`
	Value  float64 `json:"value" doc:"The build's mean of the metric." example:"14.2"`
	Stddev float64 `json:"stddev,omitempty" doc:"Standard deviation of the value over its repetitions." example:"0.3"`
	N      int     `json:"n,omitempty" doc:"Repetitions (or runs) behind the value." example:"5"`
	Build  string  `json:"build,omitempty" doc:"Build id." example:"ci-4812"`
	// BuildPosition orders the points (GET /v1/series only).
	BuildPosition    int64  `json:"build_position,omitempty" doc:"Position of the build in the series' lineage (GET /v1/builds/{id}); GET /v1/series returns points in build order, by this position. Absent when the build is not a registered build of that lineage (a label from before the registry, an agent's embedded build): such a point sits after the newest build that had run before it." example:"12"`
	GitSHA           string `json:"git_sha,omitempty" doc:"Git commit of the build, when registered with one (GET /v1/series only)." example:"9813d69a0b1c2d3e4f5a6b7c8d9e0f1a2b3c4d5e"`
	ExecutableSHA256 string `json:"executable_sha256,omitempty" doc:"sha256 of the executable that produced the point's run, from its provenance (GET /v1/series only; absent for results stored before provenance)." example:"3f2a9c0d4e5b6a7f8091a2b3c4d5e6f708192a3b4c5d6e7f8091a2b3c4d5e6f7"`
	// Bucket is set on a downsampled point (GET /v1/series?points=N).
	Bucket *PointBucket `json:"bucket,omitempty" doc:"The builds a downsampled point summarises (only with points=N)."`
}

// PointBucket describes the consecutive builds a downsampled series point
// summarises.
type PointBucket struct {
	SeqFirst int64   `json:"seq_first" doc:"Sequence number of the first build in the bucket (the point's seq is the last)." example:"31"`
	Builds   int     `json:"builds" doc:"How many of the bucket's builds this series has a point for." example:"10"`
	Min      float64 `json:"min" doc:"Lowest build mean in the bucket." example:"13.8"`
	Max      float64 `json:"max" doc:"Highest build mean in the bucket." example:"14.6"`
}

func pointFromStore(p *store.RegressPoint) SeriesPoint {
	out := SeriesPoint{Seq: p.Seq, RunKey: p.RunKey, Value: p.Value, Stddev: p.Stddev, N: p.N, Build: p.Build,
		BuildPosition: p.BuildPosition, GitSHA: p.GitSHA, ExecutableSHA256: p.ExecutableSHA256}
	if b := p.Bucket; b != nil {
		out.Bucket = &PointBucket{SeqFirst: b.SeqFirst, Builds: b.Builds, Min: b.Min, Max: b.Max}
	}
	return out
}

// SeriesWithPoints is one series and its recent points, oldest first.
type SeriesWithPoints struct {
	Series
	Points []SeriesPoint `json:"points" doc:"Its most recent points, oldest first."`
}

func seriesWithPointsFromStore(s *store.SeriesWithPoints) SeriesWithPoints {
	return SeriesWithPoints{Series: seriesFromStore(&s.RegressSeries), Points: mapSlice(s.Points, pointFromStore)}
}

// SeriesFamily names a family of series: one metric of one config of a
// suite on one build lineage, across device models.
type SeriesFamily struct {
	Suite   string `json:"suite" doc:"Suite." example:"les-ladder"`
	Lineage string `json:"lineage" doc:"Build lineage." example:"main"`
	Config  string `json:"config" doc:"Config key." example:"mode=les,budget=25%"`
	Metric  string `json:"metric" doc:"Metric." example:"decode_tps"`
	Devices int    `json:"devices" doc:"How many series (device model × OS × emulated) the family has." example:"4"`
}

func familyFromStore(k *store.SeriesKey) SeriesFamily {
	return SeriesFamily{Suite: k.Suite, Lineage: k.Lineage, Config: k.Config, Metric: k.Metric, Devices: k.Devices}
}

// Lineage is one build lineage seen anywhere in the farm: in runs,
// schedules, regression series or alert groups.
type Lineage struct {
	Lineage        string     `json:"lineage" doc:"Lineage name." example:"main"`
	Runs           int64      `json:"runs" doc:"Runs of the lineage." example:"120"`
	LastRunAt      *time.Time `json:"last_run_at,omitempty" doc:"When its newest run was created." example:"2026-12-01T14:00:00Z"`
	Series         int64      `json:"series" doc:"Regression series kept for it." example:"64"`
	NewRegressions int64      `json:"new_regressions" doc:"Regression alert groups awaiting triage (status new)." example:"1"`
}

func lineageFromStore(l *store.LineageSummary) Lineage {
	return Lineage{Lineage: l.Lineage, Runs: l.Runs, LastRunAt: l.LastRunAt, Series: l.Series, NewRegressions: l.NewRegressions}
}

// Alert is a confirmed change point of one series.
type Alert struct {
	ID             int64           `json:"id" doc:"Alert id." example:"55"`
	GroupID        int64           `json:"group_id" doc:"Alert group it belongs to." example:"21"`
	Series         Series          `json:"series" doc:"The series that changed."`
	Seq            int64           `json:"seq" doc:"Position of the first build after the change." example:"42"`
	Direction      string          `json:"direction" enum:"regression,improvement" doc:"Whether the change is a regression or an improvement (for the metric's better direction)." example:"regression"`
	RelativeChange Ratio           `json:"relative_change" doc:"(after_mean − before_mean) ÷ before_mean; null when before_mean is 0." example:"-0.12"`
	PValue         float64         `json:"p_value" doc:"p-value of the change-point test." example:"0.0004"`
	BeforeMean     float64         `json:"before_mean" doc:"Mean before the change." example:"14.2"`
	AfterMean      float64         `json:"after_mean" doc:"Mean after the change." example:"12.5"`
	BeforeN        int             `json:"before_n" doc:"Points before the change." example:"10"`
	AfterN         int             `json:"after_n" doc:"Points after the change." example:"4"`
	LastGoodSeq    int64           `json:"last_good_seq,omitempty" doc:"Where the change happened, lower end: the newest point (seq) surely at the old level. The change's first point (seq) lies after it, up to first_bad_seq (95% of the location's posterior). Absent when unknown (alerts recorded before the range was, or a range reaching the first point)." example:"41"`
	FirstBadSeq    int64           `json:"first_bad_seq,omitempty" doc:"Where the change happened, upper end: the newest point (seq) that may still be the first of the new level; every point after it is surely changed. Absent when unknown." example:"43"`
	LastGoodBuild  string          `json:"last_good_build,omitempty" doc:"Build of the point at last_good_seq, when known: the last surely-good build." example:"ci-4811"`
	FirstBadBuild  string          `json:"first_bad_build,omitempty" doc:"Build of the point at first_bad_seq, when known: the last build that may be the first bad one (builds after last_good_build up to it are possibly bad)." example:"ci-4813"`
	Attribution    json.RawMessage `json:"attribution" doc:"LES metrics that moved at the change point (JSON array of {metric, before, after, p_value, ...})."`
	Summary        string          `json:"summary" doc:"One-line human summary." example:"decode_tps −12% on Pixel 8 at ci-4812"`
	Status         string          `json:"status" enum:"new,acknowledged,invalid,fixed,reassigned" doc:"Triage status." example:"new"`
	Note           string          `json:"note" doc:"Triage note." example:"expected: ci-4812 shrank the prefetch window"`
	ReassignedTo   string          `json:"reassigned_to,omitempty" doc:"Build the regression really belongs to (status reassigned)." example:"ci-4810"`
	// Devices and CarriedByOneDevice: docs/security.md "Trust no device".
	Devices            []AlertDevice `json:"devices,omitempty" doc:"The devices the alert rests on: each device whose runs are points of the series, with its own change (GET /v1/alerts/{id} only)."`
	CarriedByOneDevice bool          `json:"carried_by_one_device,omitempty" doc:"True when one device alone shows the change while other devices of the model with points after it do not: an enrolled device can report plausible wrong numbers, so check that device before acting (GET /v1/alerts/{id} only)." example:"false"`
	CreatedAt          time.Time     `json:"created_at" doc:"When the alert was recorded." example:"2026-12-01T14:12:41Z"`
	UpdatedAt          time.Time     `json:"updated_at" doc:"When it last changed." example:"2026-12-01T14:12:41Z"`
}

// AlertDevice is one device an alert rests on.
type AlertDevice struct {
	DeviceID       string  `json:"device_id" doc:"Device id." example:"pixel8-a1"`
	Before         int     `json:"before" doc:"Its points before the change." example:"8"`
	After          int     `json:"after" doc:"Its points from the change on." example:"3"`
	BeforeMean     float64 `json:"before_mean" doc:"Mean of its points before the change (0 without any)." example:"14.2"`
	AfterMean      float64 `json:"after_mean" doc:"Mean of its points from the change on (0 without any)." example:"7.1"`
	RelativeChange Ratio   `json:"relative_change" doc:"Its own change: after_mean against its before_mean, or the alert's before_mean when it has no point before; null from 0." example:"-0.5"`
	Carries        bool    `json:"carries" doc:"Whether its own change shows the alert's: same direction, at least half the size." example:"true"`
}

func alertFromStore(a *store.Alert) Alert {
	return Alert{ID: a.ID, GroupID: a.GroupID, Series: seriesFromStore(&a.Series), Seq: a.Seq, Direction: a.Direction,
		RelativeChange: Ratio(a.RelativeChange), PValue: a.PValue, BeforeMean: a.BeforeMean, AfterMean: a.AfterMean,
		BeforeN: a.BeforeN, AfterN: a.AfterN, LastGoodSeq: a.LastGoodSeq, FirstBadSeq: a.FirstBadSeq,
		LastGoodBuild: a.LastGoodBuild, FirstBadBuild: a.FirstBadBuild, Attribution: a.Attribution, Summary: a.Summary, Status: a.Status,
		Note: a.Note, ReassignedTo: a.ReassignedTo, CreatedAt: a.CreatedAt, UpdatedAt: a.UpdatedAt,
		Devices: mapSlice(a.Devices, func(d *store.AlertDevice) AlertDevice {
			return AlertDevice{DeviceID: d.DeviceID, Before: d.Before, After: d.After, BeforeMean: d.BeforeMean, AfterMean: d.AfterMean,
				RelativeChange: Ratio(d.RelativeChange), Carries: d.Carries}
		}), CarriedByOneDevice: a.CarriedByOneDevice}
}

// AlertGroup gathers the alerts of one suite and lineage at about one
// build, across devices and metrics.
type AlertGroup struct {
	ID           int64     `json:"id" doc:"Alert group id." example:"21"`
	Suite        string    `json:"suite" doc:"Suite." example:"les-ladder"`
	Lineage      string    `json:"lineage" doc:"Build lineage." example:"main"`
	Seq          int64     `json:"seq" doc:"Position of the build the group is about." example:"42"`
	Build        string    `json:"build,omitempty" doc:"That build's id, when known." example:"ci-4812"`
	Scope        string    `json:"scope" enum:"device,platform,global" doc:"How widely the change shows: one device model, one platform, or everywhere." example:"device"`
	ScopeDetail  string    `json:"scope_detail" doc:"Which device model or platform, for those scopes." example:"Pixel 8"`
	Summary      string    `json:"summary" doc:"One-line human summary." example:"decode_tps −12% on Pixel 8"`
	Regression   bool      `json:"regression" doc:"True for a regression, false for an improvement." example:"true"`
	Status       string    `json:"status" enum:"new,acknowledged,invalid,fixed,reassigned" doc:"Triage status." example:"new"`
	Note         string    `json:"note" doc:"Triage note." example:"expected: ci-4812 shrank the prefetch window"`
	ReassignedTo string    `json:"reassigned_to,omitempty" doc:"Build the regression really belongs to (status reassigned)." example:"ci-4810"`
	Confirmation string    `json:"confirmation" enum:"none,pending,confirmed,refuted" doc:"State of the automatic re-run that confirms the change." example:"confirmed"`
	CreatedAt    time.Time `json:"created_at" doc:"When the group was created." example:"2026-12-01T14:12:41Z"`
	UpdatedAt    time.Time `json:"updated_at" doc:"When it last changed." example:"2026-12-01T14:12:41Z"`
	Alerts       []Alert   `json:"alerts,omitempty" doc:"Its alerts (GET /v1/alerts/{id} only)."`
	// Bisection is filled by GET /v1/alerts/{id} (bisect.go).
	Bisection *BisectionBrief `json:"bisection,omitempty" doc:"Its newest bisection (POST /v1/alerts/{id}/bisect), GET /v1/alerts/{id} only."`
	// AutoBisect is filled by GET /v1/alerts/{id} (bisect.go).
	AutoBisect string `json:"auto_bisect,omitempty" doc:"What became of its automatic bisection (a schedule with bisect auto raised it): started, or why it was refused or waits; GET /v1/alerts/{id} only." example:"started bisection 7"`
}

func alertGroupFromStore(g *store.AlertGroup) AlertGroup {
	out := AlertGroup{ID: g.ID, Suite: g.Suite, Lineage: g.Lineage, Seq: g.Seq, Build: g.Build, Scope: g.Scope,
		ScopeDetail: g.ScopeDetail, Summary: g.Summary, Regression: g.Regression, Status: g.Status, Note: g.Note,
		ReassignedTo: g.ReassignedTo, Confirmation: g.Confirmation, CreatedAt: g.CreatedAt, UpdatedAt: g.UpdatedAt}
	if len(g.Alerts) > 0 {
		out.Alerts = mapSlice(g.Alerts, alertFromStore)
	}
	return out
}

func alertGroupPtr(g *store.AlertGroup) *AlertGroup {
	w := alertGroupFromStore(g)
	return &w
}
