package agent

import (
	"bufio"
	"context"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/lesfarm/lesfarm/coordinator"
	"github.com/lesfarm/lesfarm/coordinator/api"
	coordartifact "github.com/lesfarm/lesfarm/coordinator/artifact"
	"github.com/lesfarm/lesfarm/coordinator/store"
)

// TestFaultStalledUpload is issue 29's fault case "a stalled upload"
// (finding 9) beside a real run: while an agent runs the smoke suite,
// four chunked uploads send a few bytes and stop. /readyz stays 200
// during the stall, each upload is cut with 408 once idle for the
// coordinator's upload idle timeout (2 s here, 60 s by default), no
// partial file is left in the artifact store, and the run succeeds in its
// first attempt, blaming nothing, with every sample exactly once.
func TestFaultStalledUpload(t *testing.T) {
	var files *coordartifact.Files
	base := coordinator.Config{HTTPHandler: func(d *coordinator.HTTPDeps) (http.Handler, error) {
		var err error
		if files, err = coordartifact.New(coordartifact.Config{Dir: d.ArtifactDir}); err != nil {
			return nil, err
		}
		h, _, err := api.New(api.Deps{Store: d.Store, Files: files, Canceller: d.Coordinator, Ready: d.Ready, Registry: d.Registry,
			Logger: d.Logger, RunListener: d.RunListener, UploadIdleTimeout: 2 * time.Second})
		return h, err
	}}
	f := newE2EFarmWith(t, e2eDeps{}, base)
	ctx := context.Background()
	st := f.c.Store()
	secret, _, err := st.CreateAPIToken(ctx, "uploader")
	if err != nil {
		t.Fatal(err)
	}
	a := startAgent(t, Config{NATSURL: f.url, Name: "e2e-upload"})
	spec := f.spec.Clone()
	spec.Repetitions = 10 // still running while the uploads stall
	if raceEnabled {
		spec.Repetitions = 4
	}
	_, runs, err := st.CreateRuns(ctx, &store.CreateRunsParams{Spec: spec, Build: "e2e", Source: "test"})
	if err != nil || len(runs) != 1 {
		t.Fatalf("runs %v err %v", runs, err)
	}
	id := runs[0].ID
	f.waitRun(t, id, store.RunRunning, 2*time.Minute)
	waitFor(t, 2*time.Minute, "the agent publishing", func() bool { return a.a.Status().Published > 0 })

	addr := strings.TrimPrefix(f.c.HTTPURL(), "http://")
	var conns []net.Conn
	for range 4 {
		conn, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		// The bound of the test, not a wait: the answer comes after 2 s.
		_ = conn.SetDeadline(time.Now().Add(30 * time.Second))
		req := "POST /v1/artifacts?name=stall.gguf HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + secret +
			"\r\nContent-Type: application/octet-stream\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n"
		if _, err := io.WriteString(conn, req); err != nil {
			t.Fatal(err)
		}
		conns = append(conns, conn)
	}
	if code := httpStatus(f.c.HTTPURL() + "/readyz"); code != http.StatusOK {
		t.Errorf("/readyz %d while uploads stall, want 200", code)
	}
	for k, conn := range conns {
		resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
		if err != nil {
			t.Fatalf("stalled upload %d: no answer: %v", k, err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusRequestTimeout {
			t.Fatalf("stalled upload %d: %d, want 408", k, resp.StatusCode)
		}
	}
	if n, err := files.Sweep(0); err != nil || n != 0 {
		t.Fatalf("%d partial files left behind (%v)", n, err)
	}
	done := f.waitRun(t, id, store.RunSucceeded, 3*time.Minute)
	if done.Attempts != 1 || done.Error != "" {
		t.Fatalf("run: %d attempts, error %q; want one attempt and no blame", done.Attempts, done.Error)
	}
	f.wantSamples(t, id, expectedSamples(spec))
	if code := httpStatus(f.c.HTTPURL() + "/readyz"); code != http.StatusOK {
		t.Errorf("/readyz %d after the stall, want 200", code)
	}
}
