package monitor

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/lesfarm/lesfarm/coordinator/regress"
	"github.com/lesfarm/lesfarm/coordinator/store"
	"github.com/lesfarm/lesfarm/jobs"
	"github.com/lesfarm/lesfarm/protocol"
)

// TestLineagesFeedSeparateSeries: runs triggered on lineage "release-1"
// carry it through claim and completion, and ObserveRun files their
// results under series keyed by "release-1", apart from main's. The
// release branch decodes 9% slower every night; since its builds are only
// compared with each other, that level difference raises no alert.
func TestLineagesFeedSeparateSeries(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	st := openStore(t)
	ram := int64(8 << 30)
	if _, err := st.UpsertDevice(ctx, &store.UpsertDeviceParams{ID: "d-mid", TTL: time.Hour,
		Fingerprint: protocol.Fingerprint{Platform: "android", DeviceModel: "phone-mid", OSVersion: "14.1", RAMBytes: &ram}}); err != nil {
		t.Fatal(err)
	}
	spec, err := jobs.Builtin("smoke")
	if err != nil {
		t.Fatal(err)
	}
	cfgKey := spec.Expand()[0].Key
	m := newMonitor(t, st, Config{})
	rng := rand.New(rand.NewPCG(21, 21))
	lineages := []string{"main", "release-1"}
	const nights = 8
	for night := 1; night <= nights; night++ {
		for _, lineage := range lineages {
			tr, runs, err := st.CreateRuns(ctx, &store.CreateRunsParams{Spec: spec, Build: fmt.Sprintf("%s-b%d", lineage, night),
				Lineage: lineage, Selector: &jobs.Selector{}, Fanout: true, Source: "test"})
			if err != nil {
				t.Fatal(err)
			}
			if tr.Lineage != lineage || len(runs) != 1 || runs[0].Lineage != lineage {
				t.Fatalf("trigger lineage %q, runs %+v: want %q", tr.Lineage, runs, lineage)
			}
			g, err := st.ClaimRun(ctx, &store.ClaimRunParams{DeviceID: "d-mid", RunIDs: []int64{runs[0].ID}, LeaseTTL: time.Minute})
			if err != nil {
				t.Fatal(err)
			}
			run, err := st.CompleteRun(ctx, agentResult(rng, g, cfgKey, lineage == "release-1"))
			if err != nil {
				t.Fatal(err)
			}
			if run.Lineage != lineage || run.State != store.RunSucceeded {
				t.Fatalf("completed run %d: lineage %q state %s", run.ID, run.Lineage, run.State)
			}
			groups, err := m.ObserveRun(ctx, run)
			if err != nil {
				t.Fatal(err)
			}
			if len(groups) > 0 {
				t.Fatalf("night %d %s: alert %q; lineages must not be compared with each other", night, lineage, groups[0].Summary)
			}
		}
	}
	decode := map[string]int64{}
	for _, lineage := range lineages {
		series, err := st.ListRegressSeries(ctx, spec.Name, lineage, cfgKey)
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range series {
			if s.Metric == regress.MetricDecodeTPS && s.DeviceModel == "phone-mid" {
				decode[lineage] = s.ID
			}
		}
		if decode[lineage] == 0 {
			t.Fatalf("no decode series of lineage %s among %d series", lineage, len(series))
		}
		pts, err := st.RegressPoints(ctx, decode[lineage], 0, 1<<62, 100)
		if err != nil {
			t.Fatal(err)
		}
		if len(pts) != nights {
			t.Fatalf("lineage %s: %d decode points, want %d", lineage, len(pts), nights)
		}
		for _, p := range pts {
			if !strings.HasPrefix(p.Build, lineage+"-") {
				t.Fatalf("lineage %s series holds build %s", lineage, p.Build)
			}
		}
	}
	if decode["main"] == decode["release-1"] {
		t.Fatal("main and release-1 share a series")
	}
	if groups, _ := st.ListAlertGroups(ctx, &store.ListAlertGroupsParams{}); len(groups) != 0 {
		t.Fatalf("%d alert groups, want none", len(groups))
	}
}
