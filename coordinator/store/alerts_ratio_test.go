package store_test

import (
	"context"
	"encoding/json"
	"math"
	"strings"
	"testing"

	"github.com/lesfarm/lesfarm/coordinator/store"
)

// TestAlertWithInfiniteRelativeChangeEncodes covers a change from a mean of
// 0 (stall fraction 0 → 0.1): the relative change is infinite, which Postgres
// stores but JSON cannot carry, so the API must answer with null instead of
// failing to encode the whole alert group.
func TestAlertWithInfiniteRelativeChangeEncodes(t *testing.T) {
	st := open(t)
	ctx := context.Background()
	ids, err := st.AddRegressPoints(ctx, []store.AddRegressPointParams{{
		Series: store.RegressSeries{Suite: "smoke", Config: "on-demand", Metric: "stall_fraction", DeviceModel: "phone-mid", Lineage: "main"},
		Point:  store.RegressPoint{Seq: 1, Value: 0.1},
	}})
	if err != nil {
		t.Fatal(err)
	}
	res, err := st.RecordAlerts(ctx, &store.RecordAlertsParams{Suite: "smoke", Lineage: "main", Seq: 1,
		Alerts: []store.NewAlert{{SeriesID: ids[0], Seq: 1, Direction: "regression", RelativeChange: math.Inf(1),
			PValue: 0.001, BeforeMean: 0, AfterMean: 0.1, BeforeN: 5, AfterN: 3, Summary: "stall 0 → 0.1"}},
		Classify: func(*store.AlertGroup) store.GroupClassification {
			return store.GroupClassification{Scope: "device", ScopeDetail: "phone-mid", Summary: "stall fraction up"}
		}})
	if err != nil {
		t.Fatal(err)
	}
	g, err := st.GetAlertGroup(ctx, res.Group.ID)
	if err != nil {
		t.Fatal(err)
	}
	if got := float64(g.Alerts[0].RelativeChange); !math.IsInf(got, 1) {
		t.Fatalf("relative change read back as %v, want +Inf", got)
	}
	b, err := json.Marshal(g)
	if err != nil {
		t.Fatalf("alert group does not encode: %v", err)
	}
	if !strings.Contains(string(b), `"relative_change":null`) {
		t.Fatalf("want relative_change null in %s", b)
	}
}
