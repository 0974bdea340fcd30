package monitor

import (
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/lesfarm/lesfarm/coordinator/ingest"
	"github.com/lesfarm/lesfarm/coordinator/regress"
	"github.com/lesfarm/lesfarm/coordinator/store"
	"github.com/lesfarm/lesfarm/internal/testenv"
	"github.com/lesfarm/lesfarm/jobs"
	"github.com/lesfarm/lesfarm/protocol"
)

// TestThroughIngest is issue 7's integration test on the real path:
// nightly runs fan out to three device models, agents' results go through
// JetStream and the coordinator's ingest (fencing tokens checked, commit,
// OnResult), and the monitor turns them into series. A regression planted
// on one device model yields exactly one alert group, scoped and
// attributed to that model, and the webhook receives it exactly once.
func TestThroughIngest(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	st := openStore(t)
	ns := testenv.NATS(t)
	nc, err := nats.Connect(ns.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	if err := ingest.EnsureStreams(ctx, js); err != nil {
		t.Fatal(err)
	}
	h := &hook{}
	srv := newHookServer(t, h)
	spec, err := jobs.Builtin("smoke")
	if err != nil {
		t.Fatal(err)
	}
	suite := spec.Name
	if err := st.SetRegressPolicy(ctx, &store.RegressPolicy{Suite: suite, WebhookURL: srv}); err != nil {
		t.Fatal(err)
	}
	m := newMonitor(t, st, Config{})
	observed := make(chan error, 1000)
	ing, err := ingest.New(ingest.Config{JS: js, Store: st, Logger: slog.New(slog.DiscardHandler),
		Reporter: observingReporter{BaseReporter: ingest.BaseReporter{Store: st}, m: m, observed: observed}})
	if err != nil {
		t.Fatal(err)
	}
	if err := ing.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ing.Stop() })

	devices := []struct{ id, platform, model, os string }{
		{"d-mid", "android", "phone-mid", "14.1"}, {"d-low", "android", "phone-low", "13"}, {"d-ip", "ios", "iphone-15", "18.2"},
	}
	for _, d := range devices {
		ram := int64(8 << 30)
		if _, err := st.UpsertDevice(ctx, &store.UpsertDeviceParams{ID: d.id, TTL: time.Hour,
			Fingerprint: protocol.Fingerprint{Platform: d.platform, DeviceModel: d.model, OSVersion: d.os, RAMBytes: &ram}}); err != nil {
			t.Fatal(err)
		}
	}
	cfgKey := spec.Expand()[0].Key
	rng := rand.New(rand.NewPCG(11, 11))
	const nights, changeAt = 28, 22
	for night := 1; night <= nights; night++ {
		_, runs, err := st.CreateRuns(ctx, &store.CreateRunsParams{Spec: spec, Build: fmt.Sprintf("b%d", night), Selector: &jobs.Selector{}, Fanout: true, Source: "test"})
		if err != nil {
			t.Fatal(err)
		}
		if len(runs) != len(devices) {
			t.Fatalf("night %d: %d runs, want one per device", night, len(runs))
		}
		for _, r := range runs {
			g, err := st.ClaimRun(ctx, &store.ClaimRunParams{DeviceID: r.TargetDeviceID, RunIDs: []int64{r.ID}, LeaseTTL: time.Minute})
			if err != nil {
				t.Fatal(err)
			}
			regressed := r.TargetDeviceID == "d-mid" && night >= changeAt
			res := agentResult(rng, g, cfgKey, regressed)
			data, err := protocol.Encode(res)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := js.Publish(ctx, protocol.ResultSubject(r.ID), data); err != nil {
				t.Fatal(err)
			}
			select {
			case err := <-observed:
				if err != nil {
					t.Fatalf("night %d: ObserveRun: %v", night, err)
				}
			case <-time.After(10 * time.Second):
				t.Fatalf("night %d: result of run %d never reached the monitor", night, r.ID)
			}
		}
	}
	groups, err := st.ListAlertGroups(ctx, &store.ListAlertGroupsParams{})
	if err != nil {
		t.Fatal(err)
	}
	if len(groups) != 1 {
		for _, g := range groups {
			t.Logf("group %d: %s", g.ID, g.Summary)
		}
		t.Fatalf("%d alert groups, want exactly 1", len(groups))
	}
	g, err := st.GetAlertGroup(ctx, groups[0].ID)
	if err != nil {
		t.Fatal(err)
	}
	if g.Scope != "device" || g.ScopeDetail != "phone-mid" || !g.Regression {
		t.Fatalf("group %+v: want a device-scoped regression on phone-mid", g)
	}
	for _, a := range g.Alerts {
		if a.Series.DeviceModel != "phone-mid" || a.Series.OSMajor != "android 14" || a.Series.Config != cfgKey {
			t.Errorf("alert on %+v", a.Series)
		}
	}
	for _, want := range []string{"decode −", "on phone-mid", "stall fraction 0.12→0.3", "predictor recall 0.82→0.64 in layers 10–13"} {
		if !strings.Contains(g.Summary, want) {
			t.Errorf("group summary %q lacks %q", g.Summary, want)
		}
	}
	waitFor(t, func() bool { _, ok := h.counts(); return ok >= 1 })
	waitSettled(t, st)
	if n, ok := h.counts(); n != 1 || ok != 1 {
		t.Fatalf("webhook received %d requests (%d ok), want exactly 1", n, ok)
	}
	if g.Build == "" || !strings.HasPrefix(g.Build, "b2") {
		t.Errorf("group build %q, want the build of night %d±1", g.Build, changeAt)
	}
}

// agentResult is what an agent reports for one run of the smoke suite:
// decode tok/s with repetitions, stall fraction, hit rate, predictor
// recall and per-layer recall in the extras.
func agentResult(rng *rand.Rand, g *store.Grant, cfgKey string, regressed bool) *protocol.Result {
	noisy := func(level, cv float64) float64 { return level * (1 + cv*rng.NormFloat64()) }
	decode, stall := 20.0, 0.12
	if regressed {
		decode, stall = 20*0.91, 0.31
	}
	c := protocol.ConfigResult{ConfigIndex: 0, ConfigKey: cfgKey, Valid: true, Repetitions: 5,
		DecodeTPS:     protocol.Stat{N: 5, Mean: noisy(decode, 0.01), Stddev: decode * 0.01},
		StallFraction: noisy(stall, 0.02), HitRate: noisy(0.7, 0.01), PredictorRecall: noisy(0.82, 0.005),
		Extra: map[string]float64{}}
	for l := 0; l < 16; l++ {
		r := 0.82
		if regressed && l >= 10 && l <= 13 {
			r = 0.64
		}
		c.Extra[fmt.Sprintf("%s.l%d", regress.MetricPredictorRecall, l)] = noisy(r, 0.01)
	}
	return &protocol.Result{RunID: g.Run.ID, Token: g.Token, DeviceID: g.Run.DeviceID, Outcome: protocol.OutcomeSucceeded,
		StartedAt: time.Now().Add(-time.Minute), FinishedAt: time.Now(), Configs: []protocol.ConfigResult{c}}
}

// observingReporter runs the monitor on each finished run, as the
// coordinator's reporter does, and sends its error to observed.
type observingReporter struct {
	ingest.BaseReporter
	m        *Monitor
	observed chan<- error
}

func (r observingReporter) Finished(ctx context.Context, run *store.Run) {
	_, err := r.m.ObserveRun(ctx, run)
	r.observed <- err
}
