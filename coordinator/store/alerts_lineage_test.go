package store_test

import (
	"context"
	"testing"

	"github.com/lesfarm/lesfarm/coordinator/store"
)

// TestAlertGroupsFilterByLineage: the alert list and the per-build query
// return only the groups of the lineage asked for ("" = all).
func TestAlertGroupsFilterByLineage(t *testing.T) {
	st := open(t)
	ctx := context.Background()
	for _, lineage := range []string{"main", "release-1"} {
		ids, err := st.AddRegressPoints(ctx, []store.AddRegressPointParams{{
			Series: store.RegressSeries{Suite: "smoke", Config: "scheduled", Metric: "decode_tps", DeviceModel: "phone-mid", Lineage: lineage},
			Point:  store.RegressPoint{Seq: 1, Value: 10},
		}})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := st.RecordAlerts(ctx, &store.RecordAlertsParams{Suite: "smoke", Lineage: lineage, Seq: 1, Build: "b-7",
			Alerts: []store.NewAlert{{SeriesID: ids[0], Seq: 1, Direction: "regression", RelativeChange: -0.1,
				PValue: 0.001, BeforeMean: 11, AfterMean: 10, BeforeN: 5, AfterN: 3, Summary: "decode -10%"}},
			Classify: func(*store.AlertGroup) store.GroupClassification {
				return store.GroupClassification{Scope: "device", ScopeDetail: "phone-mid", Summary: "decode down"}
			}}); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct {
		lineage string
		want    int
	}{{"", 2}, {"main", 1}, {"release-1", 1}, {"release-2", 0}} {
		gs, err := st.ListAlertGroups(ctx, &store.ListAlertGroupsParams{Lineage: tc.lineage})
		if err != nil {
			t.Fatal(err)
		}
		byBuild, err := st.AlertGroupsForBuild(ctx, "smoke", tc.lineage, "b-7", 0, 10)
		if err != nil {
			t.Fatal(err)
		}
		if len(gs) != tc.want || len(byBuild) != tc.want {
			t.Fatalf("lineage %q: %d groups listed, %d at the build, want %d", tc.lineage, len(gs), len(byBuild), tc.want)
		}
		for _, g := range append(gs, byBuild...) {
			if tc.lineage != "" && g.Lineage != tc.lineage {
				t.Fatalf("lineage %q returned a group of %q", tc.lineage, g.Lineage)
			}
		}
	}
}
