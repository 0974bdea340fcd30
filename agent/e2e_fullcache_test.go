package agent

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/lesfarm/lesfarm/coordinator/store"
)

// TestFaultFullCache is issue 29's fault case "an agent with a full cache"
// (finding 10) end to end: a real agent whose cache lives on a 40 MiB
// tmpfs says hello with room for the 33 MB smoke model, then its disk
// fills. Assigned the run, it refuses it before downloading anything, as
// the device's condition (lease outcome "unfit", no attempt used, nothing
// blamed on the build), and its heartbeats report the room it has left, so
// the coordinator gives it no such model while the disk stays full. The
// run goes to a second agent and succeeds in one attempt with every sample
// exactly once; /readyz stays 200 throughout (a device's disk is not the
// farm's). Once space returns, a heartbeat says so, and a run on the
// first agent succeeds with every sample.
func TestFaultFullCache(t *testing.T) {
	if testing.Short() || raceEnabled {
		t.Skip("end-to-end fault test skipped in -short and -race modes")
	}
	mnt := t.TempDir()
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size=40m", "tmpfs", mnt).CombinedOutput(); err != nil {
		t.Skipf("SKIP: cannot mount a small tmpfs to fill (needs root): %v: %s", err, out)
	}
	t.Cleanup(func() { _ = exec.Command("umount", "-l", mnt).Run() })
	f := newE2EFarm(t)
	ctx := context.Background()
	st := f.c.Store()
	size := int64(f.spec.Model.Size)
	room := func() int64 {
		d, err := st.GetDevice(ctx, "full-cache")
		if err != nil || d.Fingerprint.FreeStorageBytes == nil {
			return -1
		}
		return *d.Fingerprint.FreeStorageBytes
	}
	readyz := func() int { return httpStatus(f.c.HTTPURL() + "/readyz") }

	full := startAgent(t, Config{NATSURL: f.url, Name: "full-cache", CacheDir: mnt, Labels: map[string]string{"pool": "cache", "disk": "small"}})
	if r := room(); r < size {
		t.Fatalf("hello reported %d bytes of room on an empty 40 MiB disk, want at least the model's %d", r, size)
	}
	// The disk fills after the hello: 8 MiB stay free.
	filler := filepath.Join(mnt, "filler")
	fillDisk(t, filler)
	if err := os.Truncate(filler, fileSize(t, filler)-8<<20); err != nil {
		t.Fatal(err)
	}

	spec := f.spec.Clone()
	spec.Devices.Labels = map[string]string{"pool": "cache"}
	_, runs, err := st.CreateRuns(ctx, &store.CreateRunsParams{Spec: spec, Build: "e2e", Source: "test"})
	if err != nil || len(runs) != 1 {
		t.Fatalf("runs %v err %v", runs, err)
	}
	id := runs[0].ID
	waitFor(t, time.Minute, "the full agent refusing the run as unfit and reporting its room", func() bool {
		var outcome string
		_ = st.Pool().QueryRow(ctx, `SELECT outcome FROM leases WHERE run_id = $1 AND device_id = 'full-cache'`, id).Scan(&outcome)
		return outcome == "unfit" && room() >= 0 && room() < size
	})
	r, err := st.GetRun(ctx, id)
	if err != nil || r.State != store.RunQueued || r.Attempts != 0 {
		t.Fatalf("run after the refusal: %+v (%v), want queued with no attempt used", r, err)
	}
	if code := readyz(); code != http.StatusOK {
		t.Fatalf("/readyz %d while a device's disk is full, want 200", code)
	}
	if parts, _ := os.ReadDir(filepath.Join(mnt, "artifacts", "partial")); len(parts) != 0 || full.a.Status().RunsDone != 0 {
		t.Fatalf("the full agent downloaded or ran: %d partial files, %d runs done", len(parts), full.a.Status().RunsDone)
	}

	startAgent(t, Config{NATSURL: f.url, Name: "roomy", Labels: map[string]string{"pool": "cache"}})
	done := f.waitRun(t, id, store.RunSucceeded, 3*time.Minute)
	if done.DeviceID != "roomy" || done.Attempts != 1 || done.Error != "" {
		t.Fatalf("run %+v, want succeeded on roomy in one attempt with no error", done)
	}
	f.wantSamples(t, id, expectedSamples(spec))
	if r := room(); r < 0 || r >= size {
		t.Fatalf("the full device reports %d bytes of room while its disk is full, want less than %d", r, size)
	}
	if code := readyz(); code != http.StatusOK {
		t.Fatalf("/readyz %d after the fault, want 200", code)
	}

	// Space returns: a heartbeat says so, and the device runs the model.
	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 30*time.Second, "a heartbeat reporting the room back", func() bool { return room() >= size })
	spec2 := f.spec.Clone()
	spec2.Devices.Labels = map[string]string{"disk": "small"}
	_, runs, err = st.CreateRuns(ctx, &store.CreateRunsParams{Spec: spec2, Build: "e2e", Source: "test"})
	if err != nil || len(runs) != 1 {
		t.Fatalf("runs %v err %v", runs, err)
	}
	again := f.waitRun(t, runs[0].ID, store.RunSucceeded, 3*time.Minute)
	if again.DeviceID != "full-cache" || again.Attempts != 1 {
		t.Fatalf("run after space returned %+v, want succeeded on full-cache in one attempt", again)
	}
	f.wantSamples(t, again.ID, expectedSamples(spec2))
}

// wantSamples waits until run id has exactly want samples stored.
func (f *e2eFarm) wantSamples(t *testing.T, id int64, want int64) {
	t.Helper()
	var n int64
	waitFor(t, 30*time.Second, fmt.Sprintf("run %d: %d samples stored", id, want), func() bool {
		var err error
		n, err = f.c.Store().CountSamples(context.Background(), id)
		return err == nil && n == want
	})
}

// httpStatus returns the status of GET url (-1 when nothing answers).
func httpStatus(url string) int {
	c := http.Client{Timeout: 5 * time.Second}
	resp, err := c.Get(url)
	if err != nil {
		return -1
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	return resp.StatusCode
}

// fillDisk writes path until its file system is full.
func fillDisk(t *testing.T, path string) {
	t.Helper()
	fh, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer fh.Close()
	buf := make([]byte, 1<<20)
	for {
		if _, err := fh.Write(buf); err != nil {
			return
		}
	}
}

// fileSize returns path's size.
func fileSize(t *testing.T, path string) int64 {
	t.Helper()
	info, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return info.Size()
}
