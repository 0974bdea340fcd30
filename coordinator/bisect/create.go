package bisect

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/lesfarm/lesfarm/coordinator/store"
	"github.com/lesfarm/lesfarm/jobs"
)

// MinRounds is the fewest rounds a step may be limited to: with fewer,
// its interval rests on one or two runs a side, and one stray run decides.
const MinRounds = 3

// Request asks for a bisection of an alert group.
type Request struct {
	GroupID int64
	// AlertID picks the group's alert to decide on (its config and
	// metric, its device model); 0 takes the group's largest regression
	// on decode, prefill or TTFT.
	AlertID int64
	// LastGood and FirstBad override the range's ends (default the
	// alert's location range: its last good and first bad build).
	LastGood, FirstBad string
	// Budget bounds the device time (0: Config.Budget).
	Budget time.Duration
	// MaxRounds bounds each step's rounds (0: the plan's).
	MaxRounds   int
	RequestedBy string
}

// Problem is a request Create refuses: Status is the HTTP status it maps
// to (404, 409 or 422), Msg says why in one line, Location names the
// request field at fault ("" for none).
type Problem struct {
	Status   int
	Msg      string
	Location string
	Value    any
	// Running is the running bisection of a 409.
	Running int64
}

func (p *Problem) Error() string { return "bisect: " + p.Msg }

func unprocessable(loc string, value any, format string, args ...any) *Problem {
	return &Problem{Status: http.StatusUnprocessableEntity, Msg: fmt.Sprintf(format, args...), Location: loc, Value: value}
}

// Create checks r and starts its bisection: it picks the alert, resolves
// the range's builds in the group's lineage, a device of the alert's
// model that can run both ends (the alert's own device when it can), the
// job of the alert's runs restricted to the group's configs on that model
// at Priority, and starts the first step (the endpoints' comparison).
// Refusals are *Problem: no good build before the alert, a range that
// crosses lineages or is not ordered, an unregistered build, ends without
// an executable for the device's platform, no device (422); a running
// bisection of the group, or no online device of the model (409); an
// unknown group (404).
func (b *Bisector) Create(ctx context.Context, r *Request) (*store.Bisection, error) {
	st := b.cfg.Store
	g, err := st.GetAlertGroup(ctx, r.GroupID)
	if errors.Is(err, store.ErrNotFound) {
		return nil, &Problem{Status: http.StatusNotFound, Msg: fmt.Sprintf("alert group %d does not exist", r.GroupID), Location: "path.id", Value: r.GroupID}
	}
	if err != nil {
		return nil, err
	}
	al, prob := pickAlert(g, r.AlertID)
	if prob != nil {
		return nil, prob
	}
	expected := float64(al.RelativeChange)
	if math.IsNaN(expected) || math.IsInf(expected, 0) || expected == 0 {
		return nil, unprocessable("body.alert_id", al.ID, "alert %d has no finite change to look for (%v → %v)", al.ID, al.BeforeMean, al.AfterMean)
	}
	lg, fb, prob, err := b.resolveRange(ctx, g, al, r)
	if prob != nil || err != nil {
		return nil, cmp.Or[error](prob, err)
	}
	builds, err := st.LineageBuildsBetween(ctx, g.Lineage, lg.Position, fb.Position)
	if err != nil {
		return nil, err
	}
	pointSeq := cmp.Or(al.FirstBadSeq, al.Seq)
	var prefer string
	var jobID int64
	if pt, err := st.AlertPointAt(ctx, al.Series.ID, pointSeq); err == nil {
		prefer, jobID = pt.DeviceID, pt.JobID
	} else if !errors.Is(err, store.ErrNotFound) {
		return nil, err
	}
	dev, prob, err := b.pickDevice(ctx, al, lg, fb, prefer)
	if prob != nil || err != nil {
		return nil, cmp.Or[error](prob, err)
	}
	platform := dev.Fingerprint.ExecPlatform
	sb := make([]Build, 0, len(builds))
	for _, x := range builds {
		bb := Build{ID: x.ID, GitSHA: x.GitSHA, Position: x.Position}
		if x.ID != lg.ID && x.ID != fb.ID && !runsOn(&x, platform, dev.Fingerprint.EmbeddedBuild) {
			bb.Skipped = fmt.Sprintf("no executable for %s, the platform of %s", cmp.Or(platform, "(none)"), dev.ID)
		}
		sb = append(sb, bb)
	}
	plan := b.cfg.Plan
	if r.MaxRounds > 0 && r.MaxRounds < MinRounds {
		return nil, unprocessable("body.max_rounds", r.MaxRounds, "max_rounds %d is too few: a step needs at least %d rounds for an interval", r.MaxRounds, MinRounds)
	}
	if r.MaxRounds > 0 {
		plan.Max = r.MaxRounds
		plan.Initial = min(plan.Initial, r.MaxRounds)
	}
	s, err := NewSearch(sb, expected, cmp.Or(r.Budget, b.cfg.Budget), plan)
	if err != nil {
		return nil, unprocessable("", nil, "%v", strings.TrimPrefix(err.Error(), "bisect: "))
	}
	configs := groupConfigs(g, al)
	spec, prob, err := b.spec(ctx, g.Suite, jobID, configs)
	if prob != nil || err != nil {
		return nil, cmp.Or[error](prob, err)
	}
	raw, err := json.Marshal(s)
	if err != nil {
		return nil, err
	}
	bs, err := st.CreateBisection(ctx, &store.CreateBisectionParams{GroupID: g.ID, AlertID: al.ID, Suite: g.Suite, Lineage: g.Lineage,
		Config: al.Series.Config, Metric: al.Series.Metric, Configs: configs, DeviceModel: al.Series.DeviceModel, Emulated: al.Series.Emulated,
		DeviceID: dev.ID, Spec: spec, Budget: s.Budget, Search: raw, RequestedBy: r.RequestedBy})
	var running *store.BisectionRunningError
	if errors.As(err, &running) {
		return nil, &Problem{Status: http.StatusConflict, Msg: fmt.Sprintf("bisection %d of alert group %d is running; follow GET /v1/bisections/%d", running.ID, g.ID, running.ID),
			Location: "path.id", Value: g.ID, Running: running.ID}
	}
	if err != nil {
		return nil, err
	}
	b.log.InfoContext(ctx, "bisect: created", "bisection_id", bs.ID, "group_id", g.ID, "alert_id", al.ID, "last_good", lg.ID, "first_bad", fb.ID,
		"builds", len(sb), "device_id", dev.ID, "config", al.Series.Config, "metric", al.Series.Metric, "budget", s.Budget)
	b.Wake()
	return b.Advance(ctx, bs.ID)
}

// pickAlert returns the group's alert id, or (id 0) its largest change on
// an A/B metric, regressions first.
func pickAlert(g *store.AlertGroup, id int64) (*store.Alert, *Problem) {
	if id != 0 {
		for i := range g.Alerts {
			if a := &g.Alerts[i]; a.ID == id {
				if !Decidable(a.Series.Metric) {
					return nil, unprocessable("body.alert_id", id, "alert %d is on %s; a bisection decides on decode_tps, prefill_tps or ttft_ms", id, a.Series.Metric)
				}
				return a, nil
			}
		}
		return nil, unprocessable("body.alert_id", id, "alert %d is not in alert group %d", id, g.ID)
	}
	var best *store.Alert
	for i := range g.Alerts {
		a := &g.Alerts[i]
		if !Decidable(a.Series.Metric) {
			continue
		}
		ch := float64(a.RelativeChange)
		if math.IsNaN(ch) || math.IsInf(ch, 0) {
			continue
		}
		better := best == nil
		if !better {
			ra, rb := a.Direction == "regression", best.Direction == "regression"
			better = (ra && !rb) || (ra == rb && math.Abs(ch) > math.Abs(float64(best.RelativeChange)))
		}
		if better {
			best = a
		}
	}
	if best == nil {
		return nil, unprocessable("path.id", g.ID, "alert group %d has no decode_tps, prefill_tps or ttft_ms alert to bisect", g.ID)
	}
	return best, nil
}

// resolveRange returns the range's registered ends: the request's, else
// the alert's location range, else the build at the change and the build
// of the series' newest point before it.
func (b *Bisector) resolveRange(ctx context.Context, g *store.AlertGroup, al *store.Alert, r *Request) (lg, fb *store.Build, prob *Problem, err error) {
	st := b.cfg.Store
	firstBad := cmp.Or(r.FirstBad, al.FirstBadBuild, g.Build)
	if firstBad == "" {
		if pt, err := st.AlertPointAt(ctx, al.Series.ID, al.Seq); err == nil {
			firstBad = pt.Build
		}
	}
	if firstBad == "" {
		return nil, nil, unprocessable("body.first_bad", "", "alert %d names no build at its change; give first_bad", al.ID), nil
	}
	lastGood := cmp.Or(r.LastGood, al.LastGoodBuild)
	if lastGood == "" {
		lastGood, err = st.BuildBefore(ctx, al.Series.ID, cmp.Or(al.LastGoodSeq+1, al.Seq), firstBad)
		if errors.Is(err, store.ErrNotFound) {
			return nil, nil, unprocessable("body.last_good", "", "alert %d has no good build before it: its series (%s %s on %s) has no point before build %s; give last_good",
				al.ID, al.Series.Config, al.Series.Metric, al.Series.DeviceModel, firstBad), nil
		}
		if err != nil {
			return nil, nil, nil, err
		}
	}
	get := func(id, field, what string) (*store.Build, *Problem, error) {
		bd, err := st.GetBuild(ctx, id)
		if errors.Is(err, store.ErrNotFound) {
			msg := fmt.Sprintf("%s build %q is not registered (push it with lesfarm build push), so it cannot be run", what, id)
			if near, _ := st.NearestBuilds(ctx, id, 3); len(near) > 0 {
				msg += "; nearest: " + strings.Join(near, ", ")
			}
			return nil, unprocessable(field, id, "%s", msg), nil
		}
		return bd, nil, err
	}
	if lg, prob, err = get(lastGood, "body.last_good", "last good"); prob != nil || err != nil {
		return nil, nil, prob, err
	}
	if fb, prob, err = get(firstBad, "body.first_bad", "first bad"); prob != nil || err != nil {
		return nil, nil, prob, err
	}
	if lg.Lineage != g.Lineage || fb.Lineage != g.Lineage {
		return nil, nil, unprocessable("body.last_good", lg.ID, "the range crosses lineages: last good build %s is of lineage %s, first bad build %s of lineage %s, the alert of lineage %s; bisect within one lineage",
			lg.ID, lg.Lineage, fb.ID, fb.Lineage, g.Lineage), nil
	}
	if lg.Position >= fb.Position {
		return nil, nil, unprocessable("body.last_good", lg.ID, "last good build %s (position %d) is not before first bad build %s (position %d) in lineage %s",
			lg.ID, lg.Position, fb.ID, fb.Position, g.Lineage), nil
	}
	return lg, fb, nil, nil
}

// pickDevice returns an online device of the alert's model that runs
// both ends: prefer (the alert's own) when it can, else the first.
func (b *Bisector) pickDevice(ctx context.Context, al *store.Alert, lg, fb *store.Build, prefer string) (*store.Device, *Problem, error) {
	st := b.cfg.Store
	devs, err := st.BisectionDevices(ctx, &store.BisectionDevicesParams{DeviceModel: al.Series.DeviceModel, Emulated: al.Series.Emulated,
		Builds: []string{lg.ID, fb.ID}})
	if err != nil {
		return nil, nil, err
	}
	for i := range devs {
		if devs[i].ID == prefer {
			return &devs[i], nil, nil
		}
	}
	if len(devs) > 0 {
		return &devs[0], nil, nil
	}
	// Why none: no device of the model online, or the ends cannot run
	// on its platforms.
	all, err := st.BisectionDevices(ctx, &store.BisectionDevicesParams{DeviceModel: al.Series.DeviceModel, Emulated: al.Series.Emulated})
	if err != nil {
		return nil, nil, err
	}
	if len(all) == 0 {
		return nil, &Problem{Status: http.StatusConflict, Msg: fmt.Sprintf("no online, undrained device of model %s (emulated %v) to bisect on", al.Series.DeviceModel, al.Series.Emulated),
			Location: "path.id", Value: al.GroupID}, nil
	}
	var platforms []string
	for _, d := range all {
		if p := cmp.Or(d.Fingerprint.ExecPlatform, "(none: it runs its embedded build only)"); !slices.Contains(platforms, p) {
			platforms = append(platforms, p)
		}
	}
	var missing []string
	for _, bd := range []*store.Build{lg, fb} {
		ok := false
		for _, d := range all {
			ok = ok || runsOn(bd, d.Fingerprint.ExecPlatform, d.Fingerprint.EmbeddedBuild)
		}
		if !ok {
			missing = append(missing, bd.ID)
		}
	}
	if len(missing) == 0 {
		missing = []string{lg.ID + " and " + fb.ID + " together"}
	}
	return nil, unprocessable("path.id", al.GroupID, "builds missing for the device's platform: no online device of model %s can run %s (its devices' platforms: %s)",
		al.Series.DeviceModel, strings.Join(missing, ", "), strings.Join(platforms, ", ")), nil
}

// runsOn reports whether build bd has an executable for platform, or is
// the device's embedded build.
func runsOn(bd *store.Build, platform, embedded string) bool {
	if bd.Kind == store.BuildKindEmbedded {
		return bd.ID == embedded
	}
	for _, e := range bd.Executables {
		if e.Platform == platform && platform != "" {
			return true
		}
	}
	return false
}

// groupConfigs are the configs the steps run: the alert's first, then the
// configs of the group's other alerts on the same device model.
func groupConfigs(g *store.AlertGroup, al *store.Alert) []string {
	out := []string{al.Series.Config}
	for _, a := range g.Alerts {
		if a.Series.DeviceModel == al.Series.DeviceModel && a.Series.Emulated == al.Series.Emulated && Decidable(a.Series.Metric) &&
			!slices.Contains(out, a.Series.Config) {
			out = append(out, a.Series.Config)
		}
	}
	return out
}

// spec returns the job the steps run: the job of the alert's run (else
// the suite as stored now) with its matrix restricted to configs, at
// Priority, on no selector (each step pins its runs to its device).
func (b *Bisector) spec(ctx context.Context, suite string, jobID int64, configs []string) (*jobs.Spec, *Problem, error) {
	st := b.cfg.Store
	var base *jobs.Spec
	if jobID != 0 {
		if j, err := st.GetJob(ctx, jobID); err == nil {
			base = &j.Spec
		} else if !errors.Is(err, store.ErrNotFound) {
			return nil, nil, err
		}
	}
	if base == nil {
		sp, err := st.ResolveSuite(ctx, suite)
		if errors.Is(err, store.ErrNotFound) {
			return nil, unprocessable("path.id", suite, "suite %s of the alert no longer exists, and no run of the alert names its job", suite), nil
		}
		if err != nil {
			return nil, nil, err
		}
		base = sp
	}
	spec, missing := Restrict(base, configs)
	if spec == nil {
		return nil, unprocessable("path.id", configs[0], "config %s of the alert is not in the matrix of suite %s", configs[0], suite), nil
	}
	if len(missing) > 0 {
		b.log.InfoContext(ctx, "bisect: configs not in the suite's matrix, left out", "suite", suite, "configs", missing)
	}
	spec.Priority = Priority
	spec.Devices = jobs.Selector{}
	if err := spec.Validate(); err != nil {
		return nil, unprocessable("path.id", suite, "the alert's job cannot run restricted to its configs: %v", err), nil
	}
	return spec, nil, nil
}

// Restrict returns a copy of spec whose matrix runs only the configs keys
// (those of them it has; missing lists the others), with their keys
// unchanged; nil when it has none of keys[0]. Configs of different
// modes, budgets and profiles become the smallest matrix holding them all
// (it may hold extra combinations).
func Restrict(spec *jobs.Spec, keys []string) (*jobs.Spec, []string) {
	byKey := map[string]jobs.Config{}
	for _, c := range spec.Expand() {
		byKey[c.Key] = c
	}
	if _, ok := byKey[keys[0]]; !ok {
		return nil, keys
	}
	c := spec.Clone()
	c.Matrix.Modes, c.Matrix.Budgets, c.Matrix.Profiles = nil, nil, nil
	var missing []string
	for _, k := range keys {
		cfg, ok := byKey[k]
		if !ok {
			missing = append(missing, k)
			continue
		}
		if !slices.Contains(c.Matrix.Modes, cfg.Mode) {
			c.Matrix.Modes = append(c.Matrix.Modes, cfg.Mode)
		}
		if !cfg.Budget.IsZero() && !slices.Contains(c.Matrix.Budgets, cfg.Budget) {
			c.Matrix.Budgets = append(c.Matrix.Budgets, cfg.Budget)
		}
		if cfg.Profile != "" && !slices.Contains(c.Matrix.Profiles, cfg.Profile) {
			c.Matrix.Profiles = append(c.Matrix.Profiles, cfg.Profile)
		}
	}
	return c, missing
}
