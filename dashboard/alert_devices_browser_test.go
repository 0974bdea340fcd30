package dashboard_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/lesfarm/lesfarm/coordinator/store"
)

// TestAlertDevicesInBrowser: the alert page lists the devices each alert
// rests on (points before / from the change, its own change, whether it
// carries the alert's) and marks an alert that one device alone carries
// while another device of the model does not show it.
func TestAlertDevicesInBrowser(t *testing.T) {
	f := newFarm(t)
	ctx := context.Background()
	_, gid := f.seed(t)
	// s24-a takes the queued Galaxy S24 run and reports no change from
	// the alert's seq on: the drop rests on pixel8-a's run alone.
	cands, err := f.st.Candidates(ctx, &store.CandidatesParams{Device: &store.PlacementDevice{ID: "s24-a", Platform: "android", DeviceModel: "Galaxy S24", RAMBytes: 12 << 30}})
	if err != nil || len(cands) == 0 {
		t.Fatalf("candidates of s24-a: %v %v", cands, err)
	}
	g, err := f.st.ClaimRun(ctx, &store.ClaimRunParams{DeviceID: "s24-a", RunIDs: []int64{cands[0].RunID}, LeaseTTL: time.Minute, Coordinator: "test"})
	if err != nil {
		t.Fatal(err)
	}
	key := store.RegressSeries{Suite: "les-ladder", Config: "lookahead/budget=25%", Metric: "decode_tps", DeviceModel: "Galaxy S24", OSMajor: "14", Lineage: "main"}
	var ps []store.AddRegressPointParams
	for seq := int64(8); seq <= 10; seq++ {
		ps = append(ps, store.AddRegressPointParams{Series: key, Point: store.RegressPoint{Seq: seq, RunKey: fmt.Sprint(g.Run.ID), Value: 31.4, N: 5, Build: fmt.Sprintf("ci-%d", 4800+seq)}})
	}
	if _, err := f.st.AddRegressPoints(ctx, ps); err != nil {
		t.Fatal(err)
	}
	b := newBrowser(t)
	b.open(t, f.url, fmt.Sprintf("/alerts/%d", gid))
	row := strings.Join(strings.Fields(b.text(t, "tr.devices-row")), " ")
	for _, want := range []string{"devices:", "pixel8-a 7/3", "carries it", "s24-a 0/3", "does not show it"} {
		if !strings.Contains(row, want) {
			t.Errorf("devices row %q lacks %q", row, want)
		}
	}
	if n := b.count(t, "tr.devices-row li.carries"); n != 1 {
		t.Errorf("%d carrying devices, want 1", n)
	}
	if got := b.text(t, "table.alerts .badge.one-device"); got != "one device" {
		t.Errorf("one-device badge %q", got)
	}
}
