package cli_test

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/lesfarm/lesfarm/coordinator/api"
	"github.com/lesfarm/lesfarm/coordinator/api/client"
	"github.com/lesfarm/lesfarm/coordinator/store"
	"github.com/lesfarm/lesfarm/internal/testenv"
)

// TestScheduleCommands drives `lesfarm schedule create|list|delete`
// against a real coordinator API (PostgreSQL, huma handlers over HTTP):
// a schedule created from the shell is listed in both formats with the
// fields given, refusals (a bad cron expression, an unknown suite, a
// taken name, bad flags) exit 2 with the reason on one line, and delete
// by name and by id removes it (an unknown one exits 1).
func TestScheduleCommands(t *testing.T) {
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
	conn := []string{"--server", srv.URL, "--token", token}
	sched := func(args ...string) (int, string, string) {
		t.Helper()
		return run(t, append(append([]string{"schedule"}, args...), conn...)...)
	}

	code, out, errOut := sched("create", "--name", "nightly-ladder", "--cron", "0 2 * * *", "--timezone", "Europe/Paris", "--suite", "les-ladder",
		"--build", "nightly-{date}", "--lineage", "release-3", "--devices", "platform=android", "--override", `{"repetitions":3}`,
		"--bisect", "auto", "--catchup", "90m", "--priority", "5")
	if code != 0 || !strings.Contains(out, `created schedule 1 "nightly-ladder": 0 2 * * * (Europe/Paris) triggers suite les-ladder on lineage release-3; next at `) {
		t.Fatalf("create: %d %q %q", code, out, errOut)
	}
	if code, out, errOut = sched("create", "--name", "smoke-hourly", "--cron", "@every 1h", "--suite", "smoke", "--disabled", "--format", "json"); code != 0 {
		t.Fatalf("create --format json: %d %q %q", code, out, errOut)
	}
	var created client.Schedule
	if err := json.Unmarshal([]byte(out), &created); err != nil || created.ID != 2 || created.Enabled || created.Lineage != "main" || created.Timezone != "UTC" {
		t.Fatalf("create --format json: %v %+v", err, created)
	}

	for _, tc := range []struct {
		name string
		args []string
		code int
		want string
	}{
		{"bad cron", []string{"create", "--name", "x", "--cron", "0 25 * * *", "--suite", "smoke"}, 2, "schedule create: "},
		{"unknown suite", []string{"create", "--name", "x", "--cron", "@daily", "--suite", "nope"}, 2, "suite: no stored or built-in suite has this name"},
		{"name taken", []string{"create", "--name", "nightly-ladder", "--cron", "@daily", "--suite", "smoke"}, 2, "schedule create: "},
		{"missing cron", []string{"create", "--name", "x", "--suite", "smoke"}, 2, "schedule create: --cron is required"},
		{"bad bisect", []string{"create", "--name", "x", "--cron", "@daily", "--suite", "smoke", "--bisect", "always"}, 2, `--bisect "always": want off or auto`},
		{"bad override", []string{"create", "--name", "x", "--cron", "@daily", "--suite", "smoke", "--override", "{"}, 2, "--override is not valid JSON"},
		{"bad format", []string{"list", "--format", "yaml"}, 2, `--format "yaml": want table or json`},
		{"unknown name", []string{"delete", "nope"}, 1, `schedule delete: no schedule named "nope"`},
		{"unknown id", []string{"delete", "99"}, 1, "schedule delete: "},
	} {
		code, out, errOut := sched(tc.args...)
		if code != tc.code || !strings.Contains(errOut, tc.want) || strings.Count(strings.TrimSpace(errOut), "\n") != 0 {
			t.Errorf("%s: exit %d, stderr %q (stdout %q); want exit %d and one line with %q", tc.name, code, errOut, out, tc.code, tc.want)
		}
	}

	code, out, _ = sched("list")
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if code != 0 || len(lines) != 3 || !strings.HasPrefix(lines[0], "ID") ||
		strings.Join(strings.Fields(lines[1])[:8], " ") != "1 nightly-ladder 0 2 * * * Europe/Paris" {
		t.Fatalf("list: %d\n%s", code, out)
	}
	for _, want := range []string{"les-ladder", "release-3", "nightly-{date}", "yes", "auto"} {
		if !strings.Contains(lines[1], want) {
			t.Errorf("list row lacks %q: %s", want, lines[1])
		}
	}
	code, out, _ = sched("list", "--format", "json")
	var all []client.Schedule
	if err := json.Unmarshal([]byte(out), &all); code != 0 || err != nil || len(all) != 2 {
		t.Fatalf("list --format json: %d %v %s", code, err, out)
	}
	var ov bytes.Buffer
	if err := json.Compact(&ov, all[0].ConfigOverride); err != nil {
		t.Fatal(err)
	}
	if s := all[0]; s.Catchup != "1h30m0s" || s.Priority != 5 || s.Bisect != "auto" || !strings.Contains(string(s.DeviceSelector), `"android"`) ||
		!strings.Contains(ov.String(), `"repetitions":3`) {
		t.Errorf("stored schedule: %+v", s)
	}

	if code, out, errOut = sched("delete", "nightly-ladder"); code != 0 || out != "deleted schedule 1 (nightly-ladder)\n" {
		t.Fatalf("delete by name: %d %q %q", code, out, errOut)
	}
	if code, out, errOut = sched("delete", "2"); code != 0 || out != "deleted schedule 2 (2)\n" {
		t.Fatalf("delete by id: %d %q %q", code, out, errOut)
	}
	if code, out, _ = sched("list", "--format", "json"); code != 0 || strings.TrimSpace(out) != "[]" {
		t.Fatalf("list after delete: %d %q", code, out)
	}
}
