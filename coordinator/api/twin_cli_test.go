package api_test

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/lesfarm/lesfarm/coordinator/api"
	"github.com/lesfarm/lesfarm/coordinator/store"
	"github.com/lesfarm/lesfarm/internal/testenv"
	"github.com/lesfarm/lesfarm/profile"
	"github.com/lesfarm/lesfarm/protocol"
	"github.com/lesfarm/lesfarm/runtime/calibrate"
	"github.com/lesfarm/lesfarm/runtime/expert"
)

// TestTwinProfileThroughCoordinator measures this host (a small grid),
// uploads the profile with `lesfarm profile upload`, reads it back over
// REST, and starts `lesfarm agent --profile twin:ID` (printing its
// fingerprint), which must resolve to the very profile the device
// uploaded. Unknown devices, malformed stored profiles, invalid uploads and
// unauthenticated writes each fail with a one-line error.
func TestTwinProfileThroughCoordinator(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st, err := store.Open(ctx, testenv.MigratedPostgresURL(t), store.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	h, _, err := api.New(api.Deps{Store: st, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	defer srv.Close()
	token, _, err := st.CreateAPIToken(ctx, "device-lab")
	if err != nil {
		t.Fatal(err)
	}

	// The "device": a real measurement of this host on a small grid.
	dir := t.TempDir()
	res, err := calibrate.Measure(ctx, calibrate.Config{Name: "lab-host", Dir: dir, FileBytes: 16 << 20,
		BlockSizes: []int64{4 << 10, 256 << 10}, QueueDepths: []int{1, 4}, CellTime: 10 * time.Millisecond, CopyBytes: 8 << 20})
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(dir, "lab-host.yaml")
	if err := calibrate.WriteFile(file, res.YAML()); err != nil {
		t.Fatal(err)
	}
	uploaded, _ := os.ReadFile(file)
	server := []string{"--server", srv.URL, "--token", token}

	code, out, errOut := lesfarm(t, append([]string{"profile", "upload", file, "--device", "lab-host-1"}, server...)...)
	if code != 0 || !strings.Contains(out, "--profile twin:lab-host-1") {
		t.Fatalf("profile upload: %d %q %s", code, out, errOut)
	}

	// GET returns the YAML byte for byte.
	resp, err := http.Get(srv.URL + "/v1/devices/lab-host-1/profile")
	if err != nil {
		t.Fatal(err)
	}
	var got api.DeviceProfile
	json.NewDecoder(resp.Body).Decode(&got)
	resp.Body.Close()
	if resp.StatusCode != 200 || got.YAML != string(uploaded) || got.Name != "lab-host" || got.DeviceID != "lab-host-1" {
		t.Fatalf("GET profile: %d %+v", resp.StatusCode, got)
	}

	// The twin resolves to the same profile.
	cache := t.TempDir()
	code, out, errOut = lesfarm(t, "agent", "--name", "twin-of-lab", "--profile", "twin:lab-host-1", "--server", srv.URL, "--cache-dir", cache, "--print-fingerprint")
	if code != 0 {
		t.Fatalf("agent --profile twin: %d %s", code, errOut)
	}
	var fp protocol.Fingerprint
	if err := json.Unmarshal([]byte(out), &fp); err != nil || !fp.Emulated || fp.Profile != "lab-host" {
		t.Fatalf("twin fingerprint %q (%v): want emulated with profile lab-host", out, err)
	}
	want, err := profile.Parse(uploaded)
	if err != nil {
		t.Fatal(err)
	}
	twin, err := profile.Load(filepath.Join(cache, "twin-lab-host-1.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if a, b := expert.MarshalProfile(want, ""), expert.MarshalProfile(twin, ""); !bytes.Equal(a, b) {
		t.Fatalf("twin profile differs from the uploaded one:\n%s\nvs\n%s", b, a)
	}

	// A stored profile the parser refuses (written behind the API's back).
	if _, err := st.PutDeviceProfile(ctx, &store.DeviceProfile{DeviceID: "broken-1", Name: "broken", YAML: "name: broken\nbandwidth: fast\n"}); err != nil {
		t.Fatal(err)
	}

	for _, tc := range []struct {
		name string
		args []string
		code int
		want string
	}{
		{"unknown device", []string{"agent", "--name", "t1", "--profile", "twin:nope", "--server", srv.URL, "--cache-dir", t.TempDir(), "--print-fingerprint"},
			1, "no measured profile for device nope; run lesfarm profile measure --upload on it"},
		{"malformed stored profile", []string{"agent", "--name", "t2", "--profile", "twin:broken-1", "--server", srv.URL, "--cache-dir", t.TempDir(), "--print-fingerprint"},
			1, "the measured profile stored for device broken-1 is malformed"},
		{"bad twin id", []string{"agent", "--name", "t3", "--profile", "twin:a.b", "--server", srv.URL, "--cache-dir", t.TempDir(), "--print-fingerprint"},
			2, "is not a device id"},
		{"upload without device", append([]string{"profile", "upload", file}, server...), 2, "--device"},
		{"upload without token", []string{"profile", "upload", file, "--device", "lab-host-1", "--server", srv.URL, "--token", ""}, 1, "401"},
		{"measure --upload without device", []string{"profile", "measure", "--name", "x", "-o", filepath.Join(t.TempDir(), "x.yaml"), "--upload"}, 2, "--upload needs --device"},
	} {
		code, _, errOut := lesfarm(t, tc.args...)
		if code != tc.code || !strings.Contains(errOut, tc.want) || strings.Count(strings.TrimSpace(errOut), "\n") > 0 {
			t.Errorf("%s: exit %d, stderr %q; want exit %d and one line containing %q", tc.name, code, errOut, tc.code, tc.want)
		}
	}

	// The API refuses a profile --profile FILE would refuse (422 at body.yaml).
	req, _ := http.NewRequest(http.MethodPut, srv.URL+"/v1/devices/lab-host-1/profile", strings.NewReader(`{"yaml":"name: x\nbandwidth: 0GB/s\nlatency: 1us\nmax_in_flight: 1\n"}`))
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Content-Type", "application/json")
	resp, err = http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var pr struct {
		Errors []struct{ Location, Message string }
	}
	json.NewDecoder(resp.Body).Decode(&pr)
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnprocessableEntity || len(pr.Errors) != 1 || pr.Errors[0].Location != "body.yaml" {
		t.Fatalf("PUT invalid profile: %d %+v; want 422 at body.yaml", resp.StatusCode, pr)
	}
	if p, err := st.GetDeviceProfile(ctx, "lab-host-1"); err != nil || p.YAML != string(uploaded) {
		t.Fatalf("a refused upload changed the stored profile: %+v %v", p, err)
	}
}
