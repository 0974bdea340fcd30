//go:build linux

package agent

import (
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// TestVerifiedExecsHashOnlyChanged checks that an executable is hashed
// again only when its file may have changed: an unchanged, settled file is
// not; a file rewritten with other bytes of the same size and given its
// old mtime back is, and its new sha256 is reported; a file changed too
// recently to trust its stamp is hashed every time.
func TestVerifiedExecsHashOnlyChanged(t *testing.T) {
	t.Parallel()
	good, bad := []byte("#!/bin/sh\necho good\n"), []byte("#!/bin/sh\necho evil\n")
	sum := func(b []byte) string { s := sha256.Sum256(b); return hex.EncodeToString(s[:]) }
	later := func() time.Time { return time.Now().Add(time.Hour) }
	tests := []struct {
		name   string
		now    func() time.Time // nil: the real clock, the file just written
		tamper bool
		want   []string // what the three checks return
		hashes int
	}{
		{name: "unchanged settled file hashed once", now: later, want: []string{sum(good), sum(good), sum(good)}, hashes: 1},
		{name: "rewritten with old mtime hashed again", now: later, tamper: true, want: []string{sum(good), sum(good), sum(bad)}, hashes: 2},
		{name: "fresh file hashed every time", want: []string{sum(good), sum(good), sum(good)}, hashes: 3},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			path := filepath.Join(t.TempDir(), "lesfarm")
			if err := os.WriteFile(path, good, 0o755); err != nil {
				t.Fatal(err)
			}
			v := &verifiedExecs{now: tc.now}
			for i, want := range tc.want {
				if i == 2 && tc.tamper {
					fi, err := os.Stat(path)
					if err != nil {
						t.Fatal(err)
					}
					if err := os.WriteFile(path, bad, 0o755); err != nil {
						t.Fatal(err)
					}
					if err := os.Chtimes(path, fi.ModTime(), fi.ModTime()); err != nil {
						t.Fatal(err)
					}
				}
				got, err := v.check(path, sum(good))
				if err != nil {
					t.Fatal(err)
				}
				if got != want {
					t.Fatalf("check %d: sha256 %s, want %s", i, got, want)
				}
			}
			if v.hashes != tc.hashes {
				t.Fatalf("%d hashes, want %d", v.hashes, tc.hashes)
			}
		})
	}
}

// TestMakeExecutableKeepsStamp checks that making an executable file
// executable again leaves its stamp alone (a chmod would change its
// ctime and make every check hash it), and that a file without the mode
// gets 0755.
func TestMakeExecutableKeepsStamp(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	for _, mode := range []os.FileMode{0o755, 0o600} {
		path := filepath.Join(dir, mode.String())
		if err := os.WriteFile(path, []byte("x"), mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(path, mode); err != nil { // past the umask
			t.Fatal(err)
		}
		before, _ := stampOf(path)
		if err := makeExecutable(path); err != nil {
			t.Fatal(err)
		}
		after, ok := stampOf(path)
		fi, err := os.Stat(path)
		if err != nil || !ok {
			t.Fatal(err, ok)
		}
		if fi.Mode().Perm() != 0o755 {
			t.Fatalf("%v: mode %v after makeExecutable", mode, fi.Mode())
		}
		if mode == 0o755 && after != before {
			t.Fatalf("makeExecutable changed the stamp of an executable file: %+v -> %+v", before, after)
		}
	}
}
