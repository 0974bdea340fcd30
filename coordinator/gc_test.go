package coordinator_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lesfarm/lesfarm/coordinator"
	"github.com/lesfarm/lesfarm/coordinator/artifact"
	"github.com/lesfarm/lesfarm/coordinator/store"
	"github.com/lesfarm/lesfarm/internal/testenv"
)

// TestArtifactGCRunsPeriodically: a started coordinator runs the artifact
// collector on its own. An idle unreferenced artifact is removed (row and
// file); a pinned one stays.
func TestArtifactGCRunsPeriodically(t *testing.T) {
	f := newFarm(t)
	dir := t.TempDir()
	files, err := artifact.New(artifact.Config{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	// The artifacts exist before the coordinator starts: a collector pass
	// between a file's write and its row's insert would rightly sweep the
	// file as a stray with this test's 1 ms grace.
	ctx := context.Background()
	st, err := store.Open(ctx, f.dbURL, store.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	put := func(content string) string {
		info, err := files.Put(strings.NewReader(content), artifact.PutOptions{Size: -1})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := st.PutArtifact(ctx, info.SHA256, info.Size, content+".bin"); err != nil {
			t.Fatal(err)
		}
		return info.SHA256
	}
	unused, pinned := put("an unreferenced artifact"), put("a pinned artifact")
	if _, err := st.SetArtifactPinned(ctx, pinned, true); err != nil {
		t.Fatal(err)
	}
	var passes atomic.Int32
	var lastErr atomic.Value
	c := f.coordinator(t, "c1", func(cfg *coordinator.Config) {
		cfg.ArtifactDir = dir
		cfg.ArtifactGCInterval = 50 * time.Millisecond
		cfg.ArtifactGCGrace = time.Millisecond
		cfg.OnArtifactGC = func(_ *artifact.GCReport, err error) {
			if err != nil {
				lastErr.Store(err.Error())
			}
			passes.Add(1)
		}
	})
	start := passes.Load()
	testenv.Eventually(t, 20*time.Second, 20*time.Millisecond, func() error {
		if _, err := c.Store().GetArtifact(ctx, unused); !errors.Is(err, store.ErrNotFound) {
			return fmt.Errorf("unreferenced artifact still there (err %v) after %d passes (last error %v)", err, passes.Load(), lastErr.Load())
		}
		return nil
	})
	// One more complete pass, so the pinned artifact has had its chance to
	// be (wrongly) removed.
	after := passes.Load()
	testenv.Eventually(t, 20*time.Second, 20*time.Millisecond, func() error {
		if passes.Load() <= after {
			return fmt.Errorf("no GC pass after the removal (%d passes since start)", passes.Load()-start)
		}
		return nil
	})
	if _, err := files.Stat(unused); err == nil {
		t.Fatalf("unreferenced artifact's file still on disk")
	}
	if a, err := c.Store().GetArtifact(ctx, pinned); err != nil || !a.Pinned {
		t.Fatalf("pinned artifact: %+v, %v; want kept", a, err)
	}
	if _, err := files.Stat(pinned); err != nil {
		t.Fatalf("pinned artifact's file: %v", err)
	}
	if e := lastErr.Load(); e != nil {
		t.Fatalf("a GC pass failed: %v", e)
	}
}
