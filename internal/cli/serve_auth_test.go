package cli_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/lesfarm/lesfarm/coordinator/store"
	"github.com/lesfarm/lesfarm/internal/cli"
	"github.com/lesfarm/lesfarm/internal/testenv"
)

func TestMain(m *testing.M) {
	// A test's child process standing in for the lesfarm binary (the
	// coordinator loadtest starts).
	if os.Getenv(asLesfarmEnv) == "1" {
		os.Exit(cli.Main(os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
	}
	os.Exit(testenv.Run(m))
}

// TestServeAuthenticatesDevices runs `lesfarm serve` with its default
// --nats-auth devices and three `lesfarm agent`s: one with its device's
// credential (registers), one with a wrong secret (refused) and one that
// presents dev-a's credential under another name (its hello is a
// permissions violation, so it never registers).
func TestServeAuthenticatesDevices(t *testing.T) {
	if testing.Short() {
		t.Skip("serve end-to-end skipped in -short mode")
	}
	dbURL := testenv.MigratedPostgresURL(t)
	code, stdout, stderr := run(t, "token", "create", "--device", "dev-a", "--database-url", dbURL)
	secret := strings.TrimSpace(stdout)
	if code != 0 || !strings.HasPrefix(secret, store.DeviceSecretPrefix) || !strings.Contains(stderr, "--device-token SECRET") {
		t.Fatalf("token create --device: %d %q %q", code, stdout, stderr)
	}

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var out, errOut syncBuffer
	serve := cli.NewRoot(&cli.Env{Ctx: ctx, Stdin: strings.NewReader(""), Stdout: &out, Stderr: &errOut})
	serve.SetArgs([]string{"serve", "--data-dir", t.TempDir(), "--http-addr", "127.0.0.1:0", "--nats-listen", "127.0.0.1:0",
		"--database-url", dbURL, "--log-level", "warn"})
	done := make(chan error, 1)
	go func() { done <- serve.ExecuteContext(ctx) }()
	m := waitServing(t, 60*time.Second, regexp.MustCompile(`http: (http://127\.0\.0\.1:\d+)\n  nats: (nats://127\.0\.0\.1:\d+)`), &out, &errOut, done)
	base, natsURL := m[1], m[2]

	agents := map[string][]string{
		"good":        {"--name", "dev-a", "--user", "dev-a", "--password", secret},
		"wrong":       {"--name", "dev-b", "--token", secret[:len(secret)-3] + "aaa"},
		"impersonate": {"--name", "dev-c", "--token", secret},
	}
	actx, stopAgents := context.WithCancel(context.Background())
	agentDone := map[string]chan error{}
	for name, args := range agents {
		var aout, aerr syncBuffer
		root := cli.NewRoot(&cli.Env{Ctx: actx, Stdin: strings.NewReader(""), Stdout: &aout, Stderr: &aerr})
		root.SetArgs(append([]string{"agent", "--nats-url", natsURL, "--cache-dir", t.TempDir(), "--log-level", "warn"}, args...))
		ch := make(chan error, 1)
		agentDone[name] = ch
		go func() { ch <- root.ExecuteContext(actx) }()
	}
	// The agent checks its credentials before it starts and says why it
	// cannot run, instead of retrying in silence.
	for name, want := range map[string]string{"wrong": "refused the credentials", "impersonate": `does not let these credentials act as device "dev-c"`} {
		select {
		case err := <-agentDone[name]:
			if err == nil || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), "lesfarm token create --device") {
				t.Errorf("agent %s: %v; want an error with %q and a hint", name, err, want)
			}
			delete(agentDone, name)
		case <-time.After(20 * time.Second):
			t.Fatalf("agent %s did not fail", name)
		}
	}
	devices := func() string {
		resp, err := http.Get(base + "/v1/devices")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return string(b)
	}
	testenv.Eventually(t, 30*time.Second, 50*time.Millisecond, func() error {
		if d := devices(); !strings.Contains(d, `"dev-a"`) {
			return fmt.Errorf("dev-a did not register with its credential: %s\nserve stderr:\n%s", d, errOut.String())
		}
		return nil
	})
	// The agents without their own credential have returned (above), so
	// none of their hellos can still be in flight.
	if d := devices(); strings.Contains(d, `"dev-b"`) || strings.Contains(d, `"dev-c"`) {
		t.Fatalf("a device without its own credential registered: %s", d)
	}
	if !strings.Contains(errOut.String(), "natsauth: connection refused") {
		t.Fatalf("no refusal logged:\n%s", errOut.String())
	}
	stopAgentsAndServe(t, stopAgents, agentDone, cancel, done, &errOut)
}

// stopAgentsAndServe stops the agents (stopAgents) and waits for each to
// return, then stops serve (cancel) and requires it to return nil.
func stopAgentsAndServe(t *testing.T, stopAgents func(), agentDone map[string]chan error, cancel func(), done <-chan error, errOut fmt.Stringer) {
	t.Helper()
	stopAgents()
	for name, ch := range agentDone {
		select {
		case <-ch:
		case <-time.After(30 * time.Second):
			t.Fatalf("agent %s did not stop", name)
		}
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("serve returned %v\nstderr:\n%s", err, errOut.String())
		}
	case <-time.After(60 * time.Second):
		t.Fatal("serve did not shut down within 60s")
	}
}

// TestTokenDeviceCommands covers token create/list/revoke --device and
// their usage errors against a real database.
func TestTokenDeviceCommands(t *testing.T) {
	dbURL := testenv.MigratedPostgresURL(t)
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"create", "--device", "bad.id"}, "want a device id"},
		{[]string{"create", "--device", "dev-a", "--name", "ci"}, "not both"},
		{[]string{"create"}, "--name is required"},
		{[]string{"revoke", "--device", "x"}, "positive integer"},
	} {
		if code, _, errOut := run(t, append(append([]string{"token"}, tc.args...), "--database-url", dbURL)...); code != 2 || !strings.Contains(errOut, tc.want) {
			t.Errorf("token %v: %d %q; want exit 2 and %q", tc.args, code, errOut, tc.want)
		}
	}
	code, out, errOut := run(t, "token", "create", "--device", "pixel-8-a", "--database-url", dbURL)
	if code != 0 || !strings.HasPrefix(out, store.DeviceSecretPrefix) {
		t.Fatalf("create: %d %q %q", code, out, errOut)
	}
	code, out, _ = run(t, "token", "list", "--devices", "--database-url", dbURL)
	if code != 0 || !regexp.MustCompile(`(?m)^1\s+pixel-8-a\s+lfd_`).MatchString(out) {
		t.Fatalf("list --devices: %d %q", code, out)
	}
	if code, out, _ := run(t, "token", "list", "--database-url", dbURL); code != 0 || strings.Contains(out, "pixel-8-a") {
		t.Fatalf("API token list shows device credentials: %d %q", code, out)
	}
	if code, out, errOut := run(t, "token", "revoke", "--device", "1", "--database-url", dbURL); code != 0 || !strings.Contains(out, "pixel-8-a") {
		t.Fatalf("revoke --device: %d %q %q", code, out, errOut)
	}
	if code, _, errOut := run(t, "token", "revoke", "--device", "1", "--database-url", dbURL); code != 1 || !strings.Contains(errOut, "no live device credential") {
		t.Fatalf("second revoke: %d %q", code, errOut)
	}
	if code, out, _ := run(t, "token", "list", "--devices", "--database-url", dbURL); code != 0 || !regexp.MustCompile(`pixel-8-a.*\d{4}-\d\d-\d\dT\S+Z\s*$`).MatchString(strings.TrimSpace(out)) {
		t.Fatalf("revoked credential not shown as revoked: %q", out)
	}
}

func TestServeNATSAuthUsage(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"serve", "--nats-auth", "bogus"}, "want devices, strict or none"},
		{[]string{"serve", "--nats-url", "nats://127.0.0.1:1", "--nats-auth", "none"}, "applies to the embedded NATS server"},
	} {
		if code, _, errOut := run(t, tc.args...); code != 2 || !strings.Contains(errOut, tc.want) {
			t.Errorf("%v: %d %q; want exit 2 and %q", tc.args, code, errOut, tc.want)
		}
	}
	if code, out, _ := run(t, "serve", "--help"); code != 0 || !strings.Contains(out, "--nats-auth") || !strings.Contains(out, "token create --device") {
		t.Errorf("serve --help does not explain device authentication:\n%s", out)
	}
}
