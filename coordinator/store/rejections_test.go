package store_test

import (
	"context"
	"testing"
	"time"

	"github.com/lesfarm/lesfarm/coordinator/store"
)

// TestRecordRejectionsQuarantine counts rejections per device and drains a
// device once its window reaches the threshold, with a reason; another
// device's count is its own, and undrain clears the quarantine.
func TestRecordRejectionsQuarantine(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := open(t)
	addDevice(t, st, "bad", nil)
	addDevice(t, st, "good", nil)
	rec := func(dev string, n int, reason string) []store.Quarantined {
		t.Helper()
		var rs []store.Rejection
		for range n {
			rs = append(rs, store.Rejection{DeviceID: dev, Reason: reason})
		}
		q, err := st.RecordRejections(ctx, &store.RecordRejectionsParams{Rejections: rs, QuarantineAfter: 5, QuarantineWindow: time.Hour})
		if err != nil {
			t.Fatal(err)
		}
		return q
	}
	if q := rec("bad", 3, "decode_tps.mean 1e308 out of range"); len(q) != 0 {
		t.Fatalf("quarantined after 3 of 5: %+v", q)
	}
	if q := rec("good", 1, "junk"); len(q) != 0 {
		t.Fatalf("quarantined %+v", q)
	}
	rec("nobody", 9, "unknown device") // skipped
	q := rec("bad", 2, "config 99 unknown")
	if len(q) != 1 || q[0].DeviceID != "bad" {
		t.Fatalf("quarantined %+v, want bad", q)
	}
	if d, _ := st.GetDevice(ctx, "bad"); !d.Drained {
		t.Fatal("quarantined device not drained")
	}
	r, err := st.GetDeviceRejections(ctx, "bad")
	if err != nil {
		t.Fatal(err)
	}
	if r.Total != 5 || r.InWindow != 5 || r.Last != "config 99 unknown" || r.LastAt == nil || r.DrainReason == "" {
		t.Fatalf("bad: %+v", r)
	}
	if g, _ := st.GetDeviceRejections(ctx, "good"); g.Total != 1 || g.DrainReason != "" {
		t.Fatalf("good: %+v", g)
	}
	if d, _ := st.GetDevice(ctx, "good"); d.Drained {
		t.Fatal("a device with one rejection was drained")
	}
	// Already drained: not quarantined again.
	if q := rec("bad", 5, "more"); len(q) != 0 {
		t.Fatalf("quarantined twice: %+v", q)
	}
	if _, err := st.SetDeviceDrained(ctx, "bad", false); err != nil {
		t.Fatal(err)
	}
	if r, _ := st.GetDeviceRejections(ctx, "bad"); r.Total != 10 || r.InWindow != 0 || r.DrainReason != "" {
		t.Fatalf("after undrain: %+v", r)
	}
}
