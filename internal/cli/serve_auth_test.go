package cli_test

import (
	"context"
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

func TestMain(m *testing.M) { os.Exit(testenv.Run(m)) }

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
	st, err := store.Open(context.Background(), dbURL, store.Config{MaxConns: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	secret, _, err := st.CreateDeviceCredential(context.Background(), "dev-a")
	if err != nil {
		t.Fatal(err)
	}

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var out, errOut syncBuffer
	serve := cli.NewRoot(&cli.Env{Ctx: ctx, Stdin: strings.NewReader(""), Stdout: &out, Stderr: &errOut})
	serve.SetArgs([]string{"serve", "--data-dir", t.TempDir(), "--http-addr", "127.0.0.1:0", "--nats-listen", "127.0.0.1:0",
		"--database-url", dbURL, "--log-level", "warn"})
	done := make(chan error, 1)
	go func() { done <- serve.ExecuteContext(ctx) }()
	re := regexp.MustCompile(`http: (http://127\.0\.0\.1:\d+)\n  nats: (nats://127\.0\.0\.1:\d+)`)
	var base, natsURL string
	for deadline := time.Now().Add(60 * time.Second); base == ""; {
		if m := re.FindStringSubmatch(out.String()); m != nil {
			base, natsURL = m[1], m[2]
			break
		}
		select {
		case err := <-done:
			t.Fatalf("serve exited early: %v\nstderr:\n%s", err, errOut.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("serve did not start\nstderr:\n%s", errOut.String())
		}
		time.Sleep(50 * time.Millisecond)
	}

	agents := map[string][]string{
		"good":        {"--name", "dev-a", "--user", "dev-a", "--password", secret},
		"wrong":       {"--name", "dev-b", "--token", secret[:len(secret)-3] + "aaa"},
		"impersonate": {"--name", "dev-c", "--token", secret},
	}
	actx, stopAgents := context.WithCancel(context.Background())
	var agentDone []chan error
	for _, args := range agents {
		var aout, aerr syncBuffer
		root := cli.NewRoot(&cli.Env{Ctx: actx, Stdin: strings.NewReader(""), Stdout: &aout, Stderr: &aerr})
		root.SetArgs(append([]string{"agent", "--nats-url", natsURL, "--cache-dir", t.TempDir(), "--log-level", "warn"}, args...))
		ch := make(chan error, 1)
		agentDone = append(agentDone, ch)
		go func() { ch <- root.ExecuteContext(actx) }()
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
	for deadline := time.Now().Add(30 * time.Second); !strings.Contains(devices(), `"dev-a"`); {
		if time.Now().After(deadline) {
			t.Fatalf("dev-a did not register with its credential: %s\nserve stderr:\n%s", devices(), errOut.String())
		}
		time.Sleep(100 * time.Millisecond)
	}
	time.Sleep(2 * time.Second) // give the others time to fail
	if d := devices(); strings.Contains(d, `"dev-b"`) || strings.Contains(d, `"dev-c"`) {
		t.Fatalf("a device without its own credential registered: %s", d)
	}
	if !strings.Contains(errOut.String(), "natsauth: connection refused") {
		t.Fatalf("no refusal logged:\n%s", errOut.String())
	}
	stopAgents()
	for _, ch := range agentDone {
		select {
		case <-ch:
		case <-time.After(30 * time.Second):
			t.Fatal("an agent did not stop")
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
