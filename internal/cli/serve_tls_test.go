package cli_test

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/lesfarm/lesfarm/internal/cli"
	"github.com/lesfarm/lesfarm/internal/cli/labca"
	"github.com/lesfarm/lesfarm/internal/testenv"
)

// TestServeTLSLabCA walks the documented lab CA path (docs/security.md):
// 'lesfarm tls init' makes the CA and server certificate, 'lesfarm serve
// --tls-cert/--tls-key' serves HTTPS and TLS-only embedded NATS with them,
// an agent given ca.pem (--tls-ca) registers over TLS, and one without it
// is refused with a hint, as are CLI calls without --ca and plaintext
// requests to the HTTPS listener.
func TestServeTLSLabCA(t *testing.T) {
	if testing.Short() {
		t.Skip("serve end-to-end skipped in -short mode")
	}
	dir := filepath.Join(t.TempDir(), "tls")
	code, out, errOut := run(t, "tls", "init", "--dir", dir, "--host", "localhost,127.0.0.1")
	if code != 0 || !strings.Contains(out, "made a new CA") || !strings.Contains(out, "--tls-cert "+filepath.Join(dir, "server.pem")) {
		t.Fatalf("tls init: %d %q %q", code, out, errOut)
	}
	ca := filepath.Join(dir, labca.CAFile)
	dbURL := testenv.MigratedPostgresURL(t)
	code, secret, errOut := run(t, "token", "create", "--device", "dev-tls", "--database-url", dbURL)
	secret = strings.TrimSpace(secret)
	if code != 0 {
		t.Fatalf("token create --device: %d %q", code, errOut)
	}
	code, apiToken, errOut := run(t, "token", "create", "--name", "ci", "--database-url", dbURL)
	apiToken = strings.TrimSpace(apiToken)
	if code != 0 {
		t.Fatalf("token create: %d %q", code, errOut)
	}

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var sout, serr syncBuffer
	serve := cli.NewRoot(&cli.Env{Ctx: ctx, Stdin: strings.NewReader(""), Stdout: &sout, Stderr: &serr})
	serve.SetArgs([]string{"serve", "--data-dir", t.TempDir(), "--http-addr", "127.0.0.1:0", "--nats-listen", "127.0.0.1:0",
		"--database-url", dbURL, "--log-level", "warn",
		"--tls-cert", filepath.Join(dir, labca.ServerFile), "--tls-key", filepath.Join(dir, labca.ServerKeyFile)})
	done := make(chan error, 1)
	go func() { done <- serve.ExecuteContext(ctx) }()
	m := waitServing(t, 60*time.Second, regexp.MustCompile(`http: https://127\.0\.0\.1:(\d+)\n  nats: tls://127\.0\.0\.1:(\d+)`), &sout, &serr, done)
	httpPort, natsPort := m[1], m[2]
	// localhost is in the certificate: the agent and the CLI verify the
	// name, not only the CA.
	base := "https://localhost:" + httpPort
	natsURL := "nats://localhost:" + natsPort

	startAgent := func(name string, extra ...string) (chan error, *syncBuffer) {
		var aout, aerr syncBuffer
		root := cli.NewRoot(&cli.Env{Ctx: ctx, Stdin: strings.NewReader(""), Stdout: &aout, Stderr: &aerr})
		root.SetArgs(append([]string{"agent", "--nats-url", natsURL, "--name", name, "--cache-dir", t.TempDir(), "--log-level", "warn", "--device-token", secret}, extra...))
		ch := make(chan error, 1)
		go func() { ch <- root.ExecuteContext(ctx) }()
		return ch, &aerr
	}
	t.Setenv("LESFARM_CA", "")
	refused, _ := startAgent("dev-tls")
	select {
	case err := <-refused:
		if err == nil || !strings.Contains(err.Error(), "does not trust") || !strings.Contains(err.Error(), "--ca FILE") {
			t.Fatalf("agent without the CA: %v; want a refusal naming --ca", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("agent without the CA was not refused")
	}
	good, goodErr := startAgent("dev-tls", "--ca", ca)

	pool, err := labca.LoadPool(ca)
	if err != nil {
		t.Fatal(err)
	}
	hc := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}, Timeout: 10 * time.Second}
	devices := func() string {
		resp, err := hc.Get(base + "/v1/devices")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return string(b)
	}
	testenv.Eventually(t, 30*time.Second, 50*time.Millisecond, func() error {
		select {
		case err := <-good:
			t.Fatalf("agent with the CA exited: %v\n%s", err, goodErr.String())
		default:
		}
		if d := devices(); !strings.Contains(d, `"dev-tls"`) {
			return fmt.Errorf("dev-tls did not register over TLS: %s\nserve stderr:\n%s\nagent stderr:\n%s", d, serr.String(), goodErr.String())
		}
		return nil
	})

	// The CLI: with --ca it works; without it, or in plaintext, it says
	// what to change.
	gc := []string{"artifact", "gc", "--dry-run", "--token", apiToken}
	if code, out, errOut := run(t, append(gc, "--server", base, "--ca", ca)...); code != 0 {
		t.Fatalf("artifact gc over HTTPS with --ca: %d %q %q", code, out, errOut)
	}
	if code, _, errOut := run(t, append(gc, "--server", base)...); code == 0 || !strings.Contains(errOut, "not signed by a CA this client trusts") || !strings.Contains(errOut, "--ca FILE") {
		t.Fatalf("artifact gc without --ca: %d %q; want a refusal naming --ca", code, errOut)
	}
	if code, _, errOut := run(t, append(gc, "--server", "http://localhost:"+httpPort)...); code == 0 || !strings.Contains(errOut, "speaks HTTPS only") {
		t.Fatalf("artifact gc over plaintext HTTP: %d %q; want 'speaks HTTPS only'", code, errOut)
	}
	// Plain HTTP is refused by the listener itself.
	resp, err := http.Get("http://127.0.0.1:" + httpPort + "/v1/devices")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadRequest || strings.Contains(string(b), "dev-tls") {
		t.Fatalf("plaintext request to the HTTPS listener: %d %q", resp.StatusCode, b)
	}

	cancel()
	for _, ch := range []chan error{good, done} {
		select {
		case <-ch:
		case <-time.After(60 * time.Second):
			t.Fatal("agent or serve did not stop")
		}
	}
}
