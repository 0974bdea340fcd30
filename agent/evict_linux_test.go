package agent

import (
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"
)

// TestEvictModelDropsPages: a model file read into the page cache (and
// one just written, its pages dirty) is measured resident with mincore
// before evictModel and not after: the eviction a phone's runner does
// before each config takes effect, and record reports it.
func TestEvictModelDropsPages(t *testing.T) {
	dir := t.TempDir()
	var fs unix.Statfs_t
	if err := unix.Statfs(dir, &fs); err != nil {
		t.Fatal(err)
	}
	if fs.Type == unix.TMPFS_MAGIC {
		t.Skip("SKIP: the temp dir is on tmpfs, whose pages posix_fadvise cannot drop")
	}
	data := make([]byte, 8<<20)
	for i := range data {
		data[i] = byte(i * 7)
	}
	tests := []struct {
		name string
		read bool // read it back (clean pages) rather than leave it just written (dirty)
	}{
		{"read", true},
		{"just written", false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := filepath.Join(dir, tc.name+".gguf")
			if err := os.WriteFile(p, data, 0o644); err != nil {
				t.Fatal(err)
			}
			if tc.read {
				if _, err := os.ReadFile(p); err != nil {
					t.Fatal(err)
				}
			}
			e, err := evictModel(p)
			if err != nil {
				t.Fatal(err)
			}
			if !e.measured || e.before < 0.9 || e.after > 0.1 {
				t.Fatalf("resident before %.3f after %.3f (measured %v): want ≥ 0.9 then ≤ 0.1", e.before, e.after, e.measured)
			}
			extra := map[string]float64{}
			e.record(extra)
			if extra["page_cache_evicted"] != 1 || extra["model_resident_before_evict"] != e.before || extra["model_resident_after_evict"] != e.after {
				t.Fatalf("extra %v", extra)
			}
		})
	}
	if _, err := evictModel(filepath.Join(dir, "missing.gguf")); err == nil {
		t.Fatal("evicting a missing file: no error")
	}
}
