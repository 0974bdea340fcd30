package store_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/lesfarm/lesfarm/coordinator/store"
)

// TestAlertLocationRange: an alert keeps the detector's location range
// (last surely-good and first possibly-bad seq) with the builds recorded
// at those seqs, a refinement replaces it, and an alert without a range
// reads back as unknown (0, "").
func TestAlertLocationRange(t *testing.T) {
	st := open(t)
	ctx := context.Background()
	series := store.RegressSeries{Suite: "smoke", Config: "les", Metric: "decode_tps", DeviceModel: "phone-mid", Lineage: "main"}
	var params []store.AddRegressPointParams
	for seq := int64(1); seq <= 12; seq++ {
		params = append(params, store.AddRegressPointParams{Series: series,
			Point: store.RegressPoint{Seq: seq, RunKey: fmt.Sprint(seq), Value: 10, Build: fmt.Sprintf("b%d", seq)}})
	}
	ids, err := st.AddRegressPoints(ctx, params)
	if err != nil {
		t.Fatal(err)
	}
	classify := func(*store.AlertGroup) store.GroupClassification {
		return store.GroupClassification{Scope: "device", ScopeDetail: "phone-mid", Summary: "decode down"}
	}
	for _, tc := range []struct {
		name                string
		seq, good, bad      int64
		wantGood, wantBad   string
		wantGoodS, wantBadS int64
	}{
		{"new alert", 8, 6, 9, "b6", "b9", 6, 9},
		{"refined", 8, 7, 8, "b7", "b8", 7, 8},
		{"refined without a range", 8, 0, 0, "", "", 0, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res, err := st.RecordAlerts(ctx, &store.RecordAlertsParams{Suite: "smoke", Lineage: "main", Seq: tc.seq, Tolerance: 2,
				Alerts: []store.NewAlert{{SeriesID: ids[0], Seq: tc.seq, Direction: "regression", RelativeChange: -0.1, PValue: 1e-5,
					BeforeMean: 10, AfterMean: 9, BeforeN: 7, AfterN: 5, LastGoodSeq: tc.good, FirstBadSeq: tc.bad}},
				Classify: classify})
			if err != nil {
				t.Fatal(err)
			}
			gs, err := st.ListAlertGroups(ctx, &store.ListAlertGroupsParams{Suite: "smoke"})
			if err != nil || len(gs) != 1 {
				t.Fatalf("groups %v, %v (record: %+v)", gs, err, res)
			}
			g, err := st.GetAlertGroup(ctx, gs[0].ID)
			if err != nil {
				t.Fatal(err)
			}
			a := g.Alerts[0]
			if a.LastGoodSeq != tc.wantGoodS || a.FirstBadSeq != tc.wantBadS || a.LastGoodBuild != tc.wantGood || a.FirstBadBuild != tc.wantBad {
				t.Fatalf("range %d (%q) .. %d (%q), want %d (%q) .. %d (%q)", a.LastGoodSeq, a.LastGoodBuild, a.FirstBadSeq, a.FirstBadBuild,
					tc.wantGoodS, tc.wantGood, tc.wantBadS, tc.wantBad)
			}
		})
	}
}
