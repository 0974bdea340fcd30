package cli_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/lesfarm/lesfarm/agent/adb"
	"github.com/lesfarm/lesfarm/agent/adb/adbtest"
	"github.com/lesfarm/lesfarm/coordinator/api"
	"github.com/lesfarm/lesfarm/coordinator/store"
	"github.com/lesfarm/lesfarm/internal/testenv"
	"github.com/lesfarm/lesfarm/runtime/model"
	"github.com/lesfarm/lesfarm/runtime/tensor"
)

// TestProfileMeasureADB: `lesfarm profile measure --adb SERIAL` pushes the
// linux/arm64 lesfarm and the reference model to a fake phone, runs the
// measurement there (under qemu, reading a test file in the phone's
// /data/local/tmp), writes the profile here headed by the phone's
// identity and stores it on a real coordinator as the phone's device
// profile (phone-SERIAL, the id lesfarm agent --adb gives it). A phone
// whose /data/local/tmp is noexec, and --adb without an arm64 lesfarm,
// fail with a line that says so.
func TestProfileMeasureADB(t *testing.T) {
	if runtime.GOOS == "linux" && runtime.GOARCH == "amd64" {
		if code, _, errOut := run(t, "profile", "measure", "--adb", "X", "--name", "x", "-o", filepath.Join(t.TempDir(), "x.yaml")); code != 2 || !strings.Contains(errOut, "--adb needs --adb-exe PATH") {
			t.Fatalf("--adb without --adb-exe: %d %q", code, errOut)
		}
	}
	adbtest.RequireQEMU(t)
	adbtest.PrebuildLesfarmARM64() // links while Postgres starts
	farm := adbtest.NewFarm(t)
	farm.AddPhone(t, "PX", adbtest.Phone{Model: "Fake X", Manufacturer: "Fakeco"})
	farm.AddPhone(t, "NOEXEC", adbtest.Phone{NoExec: true})
	t.Setenv("FAKEADB_DIR", farm.Dir)

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
	token, _, err := st.CreateAPIToken(ctx, "lab")
	if err != nil {
		t.Fatal(err)
	}

	// A tiny reference model, so the decode under qemu takes seconds.
	dir := t.TempDir()
	ref := filepath.Join(dir, "tiny.gguf")
	mf, err := os.Create(ref)
	if err != nil {
		t.Fatal(err)
	}
	if err := model.WriteSynthetic(mf, model.SynthConfig{Layers: 2, Experts: 4, ExpertsUsed: 2, Hidden: 128, ExpertFFN: 64, Heads: 4, KVHeads: 2,
		Vocab: 300, Context: 64, Type: tensor.Q8_0, Seed: 1}); err != nil {
		t.Fatal(err)
	}
	mf.Close()

	exe := adbtest.BuildLesfarmARM64(t)
	out := filepath.Join(dir, "px.yaml")
	measure := func(serial string, extra ...string) (int, string, string) {
		args := []string{"profile", "measure", "--adb", serial, "--adb-path", farm.Client.Path, "--adb-exe", exe, "--name", "fake-x", "-o", out,
			"--model", ref, "--file-size", "16MiB", "--block-sizes", "4KiB,64KiB", "--queue-depths", "1,4", "--cell-time", "5ms", "--copy-size", "4MiB"}
		return run(t, append(args, extra...)...)
	}
	code, stdout, errOut := measure("PX", "--upload", "--server", srv.URL, "--token", token)
	if code != 0 || !strings.Contains(stdout, "wrote "+out+": phone PX: bandwidth") || !strings.Contains(stdout, "as device phone-PX's measured profile") {
		t.Fatalf("profile measure --adb: %d %q\n%s", code, stdout, errOut)
	}
	if !strings.Contains(errOut, "phone PX: profile: flash:") || !strings.Contains(errOut, "phone PX: profile: compute:") {
		t.Fatalf("no progress from the phone's measurement: %q", errOut)
	}
	data, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	yaml := string(data)
	for _, want := range []string{"# phone PX: Fakeco Fake X (QTI SM8550), Android 14 (SDK 34), build fake/PX/", "O_DIRECT", `description: "measured on linux/arm64`, "compute:", "service_times:"} {
		if !strings.Contains(yaml, want) {
			t.Fatalf("profile lacks %q:\n%s", want, yaml)
		}
	}
	resp, err := http.Get(srv.URL + "/v1/devices/phone-PX/profile")
	if err != nil {
		t.Fatal(err)
	}
	var got api.DeviceProfile
	json.NewDecoder(resp.Body).Decode(&got)
	resp.Body.Close()
	if resp.StatusCode != 200 || got.YAML != yaml || got.Name != "fake-x" {
		t.Fatalf("stored profile: %d %+v", resp.StatusCode, got)
	}
	// It ran on the phone: the executable and the model were pushed to the
	// phone's cache, and the measurement left nothing in its directory.
	if farm.Calls(`"push"`) != 2 {
		t.Fatalf("pushes: %d; log:\n%s", farm.Calls(`"push"`), farm.Log())
	}
	if !strings.Contains(farm.Log(), "profile measure --model "+adb.RemoteDir+"/models/") {
		t.Fatalf("the phone did not run profile measure on the pushed model:\n%s", farm.Log())
	}
	left, err := os.ReadDir(filepath.Join(farm.Dir, "PX", "root", adb.RemoteDir, "profile"))
	if err != nil || len(left) != 0 {
		t.Fatalf("left in the phone's profile dir: %v %v", left, err)
	}

	code, _, errOut = measure("NOEXEC")
	if code != 1 || !strings.Contains(errOut, "phone NOEXEC cannot execute") || !strings.Contains(errOut, "mounted noexec?") {
		t.Fatalf("noexec phone: %d %q", code, errOut)
	}
}
