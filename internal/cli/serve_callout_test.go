package cli_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nkeys"

	"github.com/lesfarm/lesfarm/coordinator/natsauth"
	"github.com/lesfarm/lesfarm/coordinator/store"
	"github.com/lesfarm/lesfarm/internal/cli"
	"github.com/lesfarm/lesfarm/internal/testenv"
)

// TestServeCalloutAuthenticatesDevices is the external-NATS deployment of
// docs/scale.md end to end: a standalone nats-server whose only static
// user is the coordinator and which delegates every other connection to
// auth callout (encrypted with an xkey), `lesfarm serve --nats-url ...
// --nats-callout-seed FILE --nats-callout-xkey-seed FILE` answering it, and `lesfarm agent`s connecting to that server. The agent
// with its device's credential registers; one with a wrong secret and one
// presenting dev-a's credential as dev-c are refused by the server on the
// coordinator's word, and the refusals are logged by serve.
var errNotYet = errors.New("not yet")

func TestServeCalloutAuthenticatesDevices(t *testing.T) {
	if testing.Short() {
		t.Skip("serve end-to-end skipped in -short mode")
	}
	dbURL := testenv.MigratedPostgresURL(t)
	code, stdout, stderr := run(t, "token", "create", "--device", "dev-a", "--database-url", dbURL)
	secret := strings.TrimSpace(stdout)
	if code != 0 || !strings.HasPrefix(secret, store.DeviceSecretPrefix) {
		t.Fatalf("token create --device: %d %q %q", code, stdout, stderr)
	}

	// The NATS server, configured as the sample config in docs/scale.md.
	issuer, err := nkeys.CreateAccount()
	if err != nil {
		t.Fatal(err)
	}
	seed, _ := issuer.Seed()
	issuerPub, _ := issuer.PublicKey()
	// The requests, which carry the devices' secrets, are encrypted to
	// the callout's xkey.
	xkey, err := nkeys.CreateCurveKeys()
	if err != nil {
		t.Fatal(err)
	}
	xkeySeed, _ := xkey.Seed()
	xkeyPub, _ := xkey.PublicKey()
	dir := t.TempDir()
	seedFile, xkeyFile := filepath.Join(dir, "callout.seed"), filepath.Join(dir, "callout.xkey")
	for f, b := range map[string][]byte{seedFile: seed, xkeyFile: xkeySeed} {
		if err := os.WriteFile(f, append(b, '\n'), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	const coordPass = "coordinator-secret"
	ns, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: -1, JetStream: true, StoreDir: t.TempDir(), NoSigs: true, NoLog: true,
		Users:       []*server.User{{Username: natsauth.CoordinatorUser, Password: coordPass}},
		AuthCallout: &server.AuthCallout{Issuer: issuerPub, AuthUsers: []string{natsauth.CoordinatorUser}, XKey: xkeyPub}})
	if err != nil {
		t.Fatal(err)
	}
	go ns.Start()
	if !ns.ReadyForConnections(10 * time.Second) {
		t.Fatal("nats-server not ready")
	}
	t.Cleanup(func() { ns.Shutdown(); ns.WaitForShutdown() })
	natsURL := ns.ClientURL()
	coordURL := strings.Replace(natsURL, "nats://", "nats://"+natsauth.CoordinatorUser+":"+coordPass+"@", 1)

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var out, errOut syncBuffer
	serve := cli.NewRoot(&cli.Env{Ctx: ctx, Stdin: strings.NewReader(""), Stdout: &out, Stderr: &errOut})
	serve.SetArgs([]string{"serve", "--data-dir", t.TempDir(), "--http-addr", "127.0.0.1:0", "--nats-url", coordURL,
		"--nats-callout-seed", seedFile, "--nats-callout-xkey-seed", xkeyFile, "--database-url", dbURL, "--log-level", "info"})
	done := make(chan error, 1)
	go func() { done <- serve.ExecuteContext(ctx) }()
	re := regexp.MustCompile(`http: (http://127\.0\.0\.1:\d+)`)
	var base string
	testenv.Eventually(t, 60*time.Second, 50*time.Millisecond, func() error {
		select {
		case err := <-done:
			t.Fatalf("serve exited early: %v\nstderr:\n%s", err, errOut.String())
		default:
		}
		if m := re.FindStringSubmatch(out.String()); m != nil && strings.Contains(errOut.String(), "serving NATS auth callout") {
			base = m[1]
			return nil
		}
		return errNotYet
	})
	if !strings.Contains(errOut.String(), issuerPub) || !strings.Contains(errOut.String(), xkeyPub) {
		t.Fatalf("serve did not log the callout issuer %s and xkey %s:\n%s", issuerPub, xkeyPub, errOut.String())
	}

	agents := map[string][]string{
		"good":        {"--name", "dev-a", "--user", "dev-a", "--password", secret},
		"wrong":       {"--name", "dev-b", "--token", secret[:len(secret)-3] + "aaa"},
		"impersonate": {"--name", "dev-c", "--token", secret},
	}
	actx, stopAgents := context.WithCancel(context.Background())
	defer stopAgents()
	agentDone := map[string]chan error{}
	for name, args := range agents {
		var aout, aerr syncBuffer
		root := cli.NewRoot(&cli.Env{Ctx: actx, Stdin: strings.NewReader(""), Stdout: &aout, Stderr: &aerr})
		root.SetArgs(append([]string{"agent", "--nats-url", natsURL, "--cache-dir", t.TempDir(), "--log-level", "warn"}, args...))
		ch := make(chan error, 1)
		agentDone[name] = ch
		go func() { ch <- root.ExecuteContext(actx) }()
	}
	for _, name := range []string{"wrong", "impersonate"} {
		select {
		case err := <-agentDone[name]:
			if err == nil {
				t.Errorf("agent %s ran without its own credential", name)
			}
			delete(agentDone, name)
		case <-time.After(30 * time.Second):
			t.Fatalf("agent %s was not refused", name)
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
	testenv.Eventually(t, 30*time.Second, 100*time.Millisecond, func() error {
		if strings.Contains(devices(), `"dev-a"`) {
			return nil
		}
		return errNotYet
	})
	if d := devices(); strings.Contains(d, `"dev-b"`) || strings.Contains(d, `"dev-c"`) {
		t.Fatalf("a device without its own credential registered: %s", d)
	}
	if !strings.Contains(errOut.String(), "natsauth: callout: connection refused") {
		t.Fatalf("serve logged no callout refusal:\n%s", errOut.String())
	}
	stopAgentsAndServe(t, stopAgents, agentDone, cancel, done, &errOut)
}
