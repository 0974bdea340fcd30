package artifact

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"sync/atomic"
	"testing"
)

// TestGetWithoutRoomFailsFastAndCleans: an artifact the cache cannot hold
// fails at once with ErrNoSpace (no request, no retries), and the partial
// file a previous attempt left is removed (issue 29, finding 10: the agent
// retried 5 times on a full cache and left its .part file behind); Room
// and CanHold say so before anything is fetched.
func TestGetWithoutRoomFailsFastAndCleans(t *testing.T) {
	t.Parallel()
	data := make([]byte, 40)
	var hits atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		w.Write(data)
	}))
	defer srv.Close()
	c, err := New(Config{Dir: t.TempDir(), MaxBytes: 50, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	// Another model, pinned by a run, holds 20 of the 50 bytes.
	other := []byte("twenty bytes pinned.")
	osrv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.Write(other) }))
	defer osrv.Close()
	h, err := c.Get(context.Background(), Spec{URL: osrv.URL, SHA256: hexSum(other), Size: int64(len(other))}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Release()
	spec := Spec{URL: srv.URL, SHA256: hexSum(data), Size: int64(len(data))}
	part := c.partialPath(spec.SHA256)
	if err := os.WriteFile(part, data[:5], 0o644); err != nil {
		t.Fatal(err)
	}
	if room, ok := c.Room(); ok && room >= spec.Size {
		t.Fatalf("Room = %d with 20 of 50 bytes pinned and a 5-byte partial, want < %d", room, spec.Size)
	}
	if err := c.CanHold(spec); !errors.Is(err, ErrNoSpace) {
		t.Fatalf("CanHold = %v, want ErrNoSpace", err)
	}
	_, err = c.Get(context.Background(), spec, nil)
	if !errors.Is(err, ErrNoSpace) || hits.Load() != 0 {
		t.Fatalf("Get = %v after %d requests, want ErrNoSpace and none", err, hits.Load())
	}
	if _, err := os.Stat(part); !os.IsNotExist(err) {
		t.Fatalf("the partial file is still there (%v)", err)
	}
	h.Release()
	if err := c.CanHold(spec); err != nil {
		t.Fatalf("once the other model is released: CanHold = %v", err)
	}
	if _, err := c.Get(context.Background(), spec, nil); err != nil {
		t.Fatalf("Get once room returned: %v", err)
	}
}
