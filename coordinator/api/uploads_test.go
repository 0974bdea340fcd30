package api

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/lesfarm/lesfarm/coordinator/artifact"
	"github.com/lesfarm/lesfarm/internal/testenv"
)

// TestUploadStalledIsCut: a chunked upload that stops sending is answered
// 408 once it has sent nothing for Deps.UploadIdleTimeout, and its partial
// file is gone (issue 29, finding 9: the read timeout was lifted, so the
// handler waited for ever and the partial file stayed).
func TestUploadStalledIsCut(t *testing.T) {
	t.Parallel()
	e := newEnv(t, func(d *Deps) { d.UploadIdleTimeout = 200 * time.Millisecond })
	conn, err := net.Dial("tcp", strings.TrimPrefix(e.srv.URL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	// The bound of the test, not a wait: the answer comes after 200 ms.
	conn.SetDeadline(time.Now().Add(20 * time.Second))
	req := "POST /v1/artifacts?name=stall.gguf HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + e.token +
		"\r\nContent-Type: application/octet-stream\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n"
	if _, err := io.WriteString(conn, req); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatalf("no answer to a stalled upload: %v", err)
	}
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusRequestTimeout {
		t.Fatalf("stalled upload: %d %s, want 408", resp.StatusCode, body)
	}
	decodeProblem(t, resp.Header.Get("Content-Type"), body)
	if n, err := e.files.Sweep(0); err != nil || n != 0 {
		t.Fatalf("%d partial files left behind (%v)", n, err)
	}
}

// TestUploadRefusedWithoutSpace: an upload that would leave the
// coordinator's disk below its reserve is refused with 507 problem+json,
// before the body is read when its length is declared and at once when it
// is not, and leaves no partial file (issue 29, finding 9).
func TestUploadRefusedWithoutSpace(t *testing.T) {
	t.Parallel()
	var files *artifact.Files
	e := newEnv(t, func(d *Deps) {
		f, err := artifact.New(artifact.Config{Dir: t.TempDir(), MaxSize: 1 << 20, MinFree: 1 << 62})
		if err != nil {
			t.Fatal(err)
		}
		d.Files, files = f, f
	})
	for _, chunked := range []bool{false, true} {
		var body io.Reader = bytes.NewReader([]byte("model bytes"))
		if chunked {
			body = io.MultiReader(strings.NewReader("model "), strings.NewReader("bytes")) // no length: chunked
		}
		resp := e.do("POST", "/v1/artifacts?name=m.gguf", body, "Authorization", "Bearer "+e.token)
		b, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != http.StatusInsufficientStorage {
			t.Fatalf("upload (chunked %v) on a full disk: %d %s, want 507", chunked, resp.StatusCode, b)
		}
		if p := decodeProblem(t, resp.Header.Get("Content-Type"), b); !strings.Contains(p.Detail, "free disk space") {
			t.Fatalf("507 detail %q", p.Detail)
		}
	}
	if n, err := files.Sweep(0); err != nil || n != 0 {
		t.Fatalf("%d partial files left behind (%v)", n, err)
	}
}

// TestReuploadKeepsFirstName: identical bytes uploaded again under another
// name are the same artifact, and keep the name they were first uploaded
// under (issue 29, finding 12: a re-upload renamed it).
func TestReuploadKeepsFirstName(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	up := func(name string) Artifact {
		resp := e.do("POST", "/v1/artifacts?name="+name, strings.NewReader("same bytes"), "Authorization", "Bearer "+e.token)
		var a Artifact
		if err := json.NewDecoder(resp.Body).Decode(&a); err != nil {
			t.Fatal(err)
		}
		return a
	}
	first := up("qwen-q4.gguf")
	if again := up("evil-name.gguf"); again.SHA256 != first.SHA256 || again.Name != "qwen-q4.gguf" {
		t.Fatalf("re-upload under another name: %+v, want the first name kept", again)
	}
}

// TestRangeZeroSuffixIs416: "bytes=-0" asks for the last zero bytes, which
// RFC 9110 makes unsatisfiable: 416 with Content-Range bytes */SIZE, not
// an empty 206 (issue 29, finding 12). A zero suffix beside a satisfiable
// range is ignored.
func TestRangeZeroSuffixIs416(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	data := []byte("0123456789")
	resp := e.do("POST", "/v1/artifacts", bytes.NewReader(data), "Authorization", "Bearer "+e.token)
	var a Artifact
	if err := json.NewDecoder(resp.Body).Decode(&a); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		rng, want string
		code      int
	}{
		{"bytes=-0", "", http.StatusRequestedRangeNotSatisfiable},
		{"bytes=-00", "", http.StatusRequestedRangeNotSatisfiable},
		{"bytes=-0, 2-3", "23", http.StatusPartialContent},
		{"bytes=-3", "789", http.StatusPartialContent},
	}
	for _, tc := range tests {
		resp := e.do("GET", "/v1/artifacts/"+a.SHA256, nil, "Range", tc.rng)
		b, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != tc.code || (tc.code == http.StatusPartialContent && string(b) != tc.want) {
			t.Errorf("Range %s: %d %q, want %d %q", tc.rng, resp.StatusCode, b, tc.code, tc.want)
		}
		if tc.code == http.StatusRequestedRangeNotSatisfiable && resp.Header.Get("Content-Range") != "bytes */10" {
			t.Errorf("Range %s: Content-Range %q, want bytes */10", tc.rng, resp.Header.Get("Content-Range"))
		}
	}
}

// TestDownloadStalledIsCut: an anonymous download whose client stops
// reading holds one of the bounded anonymous slots (a second one is 503)
// only until Deps.DownloadIdleTimeout passes without a write; then the
// connection is cut, the slot is free again, and the stalled client got
// a truncated body (issue 29, finding 12: stalled downloads were
// unbounded in number and time).
func TestDownloadStalledIsCut(t *testing.T) {
	t.Parallel()
	const size = 32 << 20 // beyond what loopback socket buffers hold
	var files *artifact.Files
	e := newEnv(t, func(d *Deps) {
		f, err := artifact.New(artifact.Config{Dir: t.TempDir(), MaxSize: size})
		if err != nil {
			t.Fatal(err)
		}
		d.Files, files = f, f
		d.MaxAnonymousStreams, d.DownloadIdleTimeout = 1, 200*time.Millisecond
	})
	info, err := files.Put(io.LimitReader(zeroReader{}, size), artifact.PutOptions{Size: size})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.st.PutArtifact(context.Background(), info.SHA256, info.Size, "big.gguf"); err != nil {
		t.Fatal(err)
	}
	path := "/v1/artifacts/" + info.SHA256
	conn, err := net.Dial("tcp", strings.TrimPrefix(e.srv.URL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(20 * time.Second)) // the bound of the test
	if _, err := io.WriteString(conn, "GET "+path+" HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	// The stalled download holds the only anonymous slot, then is cut.
	sawBusy := false
	testenv.Eventually(t, 15*time.Second, 20*time.Millisecond, func() error {
		req, err := http.NewRequest("GET", e.srv.URL+path, nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Range", "bytes=0-0")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode == http.StatusServiceUnavailable {
			sawBusy = true
			return fmt.Errorf("the slot is still held")
		}
		if resp.StatusCode != http.StatusPartialContent {
			t.Fatalf("GET %s bytes=0-0: %d", path, resp.StatusCode)
		}
		if !sawBusy {
			// The stalled request's handler has not taken the slot yet
			// (its request may still be on the way): not the cut.
			return fmt.Errorf("the slot is not held yet")
		}
		return nil
	})
	if !sawBusy {
		t.Fatal("a second anonymous download was never refused while the first stalled")
	}
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatalf("stalled download: %v", err)
	}
	n, _ := io.Copy(io.Discard, resp.Body)
	if resp.StatusCode != http.StatusOK || n >= size {
		t.Fatalf("stalled download: %d with %d of %d bytes, want 200 cut short", resp.StatusCode, n, size)
	}
}

// zeroReader reads zeros for ever.
type zeroReader struct{}

func (zeroReader) Read(p []byte) (int, error) {
	clear(p)
	return len(p), nil
}
