package agent

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/lesfarm/lesfarm/agent/telemetry"
)

// TestUnreportedDiskRoundTrip: saved entries come back after a "restart"
// (a new unreportedDisk on the same dir) with their result record; removed,
// expired, malformed and half-written files do not, and at most
// maxUnreported are kept, the latest deadlines.
func TestUnreportedDiskRoundTrip(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "unreported")
	d := unreportedDisk{dir: dir}
	now := time.Now()
	entry := func(run int64, until time.Time) unreportedRun {
		return unreportedRun{runID: run, token: run * 10, until: until,
			rec: telemetry.Record{Subject: "lesfarm.v1.result.dev.1", MsgID: "r/1/10", Data: []byte{byte(run), 0, 0xff}, Summary: true}}
	}
	for i := int64(1); i <= maxUnreported+3; i++ {
		if err := d.save(entry(i, now.Add(time.Duration(i)*time.Minute))); err != nil {
			t.Fatal(err)
		}
	}
	if err := d.save(entry(100, now.Add(-time.Second))); err != nil { // expired by load time
		t.Fatal(err)
	}
	d.remove(entry(maxUnreported+3, time.Time{}))
	os.WriteFile(filepath.Join(dir, ".tmp-123"), []byte("{"), 0o600)                                                                                   // cut short
	os.WriteFile(filepath.Join(dir, "7-70.json.bak"), []byte("x"), 0o600)                                                                              // foreign: left alone
	os.WriteFile(filepath.Join(dir, "55-550.json"), []byte("{not json"), 0o600)                                                                        // torn
	os.WriteFile(filepath.Join(dir, "56-1.json"), []byte(`{"run_id":57,"token":1,"until":"2999-01-01T00:00:00Z","subject":"s","data":"AA=="}`), 0o600) // name mismatch

	got, err := unreportedDisk{dir: dir}.load(now)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != maxUnreported {
		t.Fatalf("loaded %d entries, want %d", len(got), maxUnreported)
	}
	// Entries 1..maxUnreported+2 were live; the oldest deadlines go.
	if got[0].runID != 3 || got[len(got)-1].runID != maxUnreported+2 {
		t.Fatalf("kept runs %d..%d, want 3..%d", got[0].runID, got[len(got)-1].runID, maxUnreported+2)
	}
	for _, u := range got {
		want := entry(u.runID, u.until)
		if u.token != want.token || !u.until.Equal(want.until) || u.rec.Subject != want.rec.Subject || u.rec.MsgID != want.rec.MsgID || !bytes.Equal(u.rec.Data, want.rec.Data) || !u.rec.Summary {
			t.Fatalf("entry %d came back as %+v, want %+v", u.runID, u, want)
		}
	}
	des, _ := os.ReadDir(dir)
	if len(des) != maxUnreported+1 { // the kept entries and the foreign file
		var names []string
		for _, de := range des {
			names = append(names, de.Name())
		}
		t.Fatalf("dir holds %v after load, want the %d kept entries and the foreign file", names, maxUnreported)
	}
	if got, err := (unreportedDisk{}).load(now); err != nil || got != nil {
		t.Fatalf("zero unreportedDisk: %v, %v", got, err)
	}
}
