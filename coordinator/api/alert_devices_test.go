package api

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"testing"

	"github.com/lesfarm/lesfarm/coordinator/store"
	"github.com/lesfarm/lesfarm/jobs"
)

// TestAlertShowsItsDevices: an alert shows the devices it rests on, each
// with its own change, and one carried by a single device while the other
// devices of the same model saw no change is marked carried_by_one_device
// (issue 29, "builds are code": a single device reporting a plausible 50%
// drop planted an alert against a build). A change every device shows,
// and one shown by the only device there is, are not marked.
func TestAlertShowsItsDevices(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := context.Background()
	spec, err := jobs.Builtin("smoke")
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		// after is each device's decode tok/s from seq 4 on (14 before).
		after    map[string]float64
		carriers []string
		marked   bool
	}{
		{"one-liar", map[string]float64{"liar": 7, "honest-1": 14, "honest-2": 14.1}, []string{"liar"}, true},
		{"every-device", map[string]float64{"a": 7, "b": 7.2, "c": 6.9}, []string{"a", "b", "c"}, false},
		{"only-device", map[string]float64{"alone": 7}, []string{"alone"}, false},
	}
	for _, tc := range tests {
		var points []store.AddRegressPointParams
		sum := 0.0
		for dev, after := range tc.after {
			addDevice(t, e.st, tc.name+"-"+dev, "android", "Pixel 8", nil)
			for seq := int64(1); seq <= 6; seq++ {
				_, runs, err := e.st.CreateRuns(ctx, &store.CreateRunsParams{Spec: spec, Build: fmt.Sprintf("b%d", seq)})
				if err != nil {
					t.Fatal(err)
				}
				if _, err := e.st.Pool().Exec(ctx, `UPDATE runs SET device_id = $2 WHERE id = $1`, runs[0].ID, tc.name+"-"+dev); err != nil {
					t.Fatal(err)
				}
				v := 14.0
				if seq >= 4 {
					v = after
					sum += after
				}
				points = append(points, store.AddRegressPointParams{
					Series: store.RegressSeries{Suite: tc.name, Config: "resident", Metric: "decode_tps", DeviceModel: "Pixel 8", OSMajor: "14", Lineage: "main"},
					Point:  store.RegressPoint{Seq: seq, RunKey: strconv.FormatInt(runs[0].ID, 10), Value: v, N: 3, Build: fmt.Sprintf("b%d", seq)},
				})
			}
		}
		ids, err := e.st.AddRegressPoints(ctx, points)
		if err != nil {
			t.Fatal(err)
		}
		afterMean := sum / float64(3*len(tc.after))
		rec, err := e.st.RecordAlerts(ctx, &store.RecordAlertsParams{Suite: tc.name, Lineage: "main", Seq: 4, Build: "b4",
			Alerts: []store.NewAlert{{SeriesID: ids[0], Seq: 4, Direction: "regression", RelativeChange: (afterMean - 14) / 14, PValue: 0.001,
				BeforeMean: 14, AfterMean: afterMean, BeforeN: 3 * len(tc.after), AfterN: 3 * len(tc.after), Summary: "decode_tps down"}},
			Classify: func(*store.AlertGroup) store.GroupClassification {
				return store.GroupClassification{Scope: "device", ScopeDetail: "Pixel 8", Summary: "decode_tps down"}
			}})
		if err != nil || rec.Group == nil {
			t.Fatalf("%s: record alert: %+v %v", tc.name, rec, err)
		}
		resp := e.api.Get(fmt.Sprintf("/v1/alerts/%d", rec.Group.ID))
		if resp.Code != http.StatusOK {
			t.Fatalf("%s: GET alert: %d %s", tc.name, resp.Code, resp.Body)
		}
		var g AlertGroup
		if err := json.Unmarshal(resp.Body.Bytes(), &g); err != nil || len(g.Alerts) != 1 {
			t.Fatalf("%s: alert group %s: %v", tc.name, resp.Body, err)
		}
		a := g.Alerts[0]
		if len(a.Devices) != len(tc.after) {
			t.Fatalf("%s: alert rests on %+v, want the %d devices", tc.name, a.Devices, len(tc.after))
		}
		var carriers []string
		for _, d := range a.Devices {
			if d.Before != 3 || d.After != 3 || d.BeforeMean != 14 {
				t.Errorf("%s: device %+v, want 3 points at 14 before and 3 after", tc.name, d)
			}
			if d.Carries {
				carriers = append(carriers, d.DeviceID[len(tc.name)+1:])
			}
		}
		if fmt.Sprint(carriers) != fmt.Sprint(slices.Sorted(slices.Values(tc.carriers))) || a.CarriedByOneDevice != tc.marked {
			t.Errorf("%s: carriers %v, carried_by_one_device %v; want %v, %v", tc.name, carriers, a.CarriedByOneDevice, tc.carriers, tc.marked)
		}
	}
}
