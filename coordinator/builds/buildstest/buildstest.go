// Package buildstest compiles small real Go executables for tests of the
// build registry (coordinator/builds, the API, lesfarm build push): tiny
// programs in throwaway modules, one of which claims the lesfarm module
// path and main package, so the registration rules run on real build
// information without compiling the whole farm. It is a harness package:
// production code never imports it.
package buildstest

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/lesfarm/lesfarm/coordinator/store"
)

// Set is a set of compiled executables, each a path.
type Set struct {
	// Lesfarm maps a platform (GOOS/GOARCH) to a tiny program of module
	// github.com/lesfarm/lesfarm, package ./cmd/lesfarm, built without
	// VCS stamping: this machine's platform, linux/arm64 and
	// android/arm64.
	Lesfarm map[string]string
	// Clean and Dirty are ./cmd/lesfarm built in a git checkout with VCS
	// stamping for this machine's platform, Dirty after an uncommitted
	// change; Revision is their vcs.revision.
	Clean, Dirty, Revision string
	// Other and OtherArm64 are programs of module example.com/other.
	Other, OtherArm64 string
	// Tool is a program of the lesfarm module whose main package is not
	// ./cmd/lesfarm.
	Tool string
	// NotGo is a shell script.
	NotGo string
	// Source is the throwaway lesfarm module (a git checkout with an
	// uncommitted change), for tests that compile ./cmd/lesfarm.
	Source string
}

// Host is this machine's platform.
func Host() string { return runtime.GOOS + "/" + runtime.GOARCH }

const mainGo = "package main\n\nfunc main() { println(\"hi\") }\n"

// New compiles a Set into a temporary directory of t (a few seconds the
// first time, then the Go build cache makes each a link step). It fails
// the test when go or git is missing.
func New(t testing.TB) *Set {
	t.Helper()
	s, err := build(t.TempDir())
	if err != nil {
		t.Fatalf("buildstest: %v", err)
	}
	return s
}

func build(dir string) (*Set, error) {
	lf, other := filepath.Join(dir, "src", "lesfarm"), filepath.Join(dir, "src", "other")
	if err := writeFiles(lf, map[string]string{"go.mod": "module github.com/lesfarm/lesfarm\n\ngo 1.22\n",
		"cmd/lesfarm/main.go": mainGo, "internal/tool/main.go": mainGo}); err != nil {
		return nil, err
	}
	if err := writeFiles(other, map[string]string{"go.mod": "module example.com/other\n\ngo 1.22\n", "main.go": mainGo}); err != nil {
		return nil, err
	}
	s := &Set{Lesfarm: map[string]string{}, Other: filepath.Join(dir, "other"), OtherArm64: filepath.Join(dir, "other-arm64"),
		Tool: filepath.Join(dir, "tool"), Source: lf, Clean: filepath.Join(dir, "clean"), Dirty: filepath.Join(dir, "dirty"), NotGo: filepath.Join(dir, "script.sh")}
	if err := os.WriteFile(s.NotGo, []byte("#!/bin/sh\necho lesfarm\n"), 0o755); err != nil {
		return nil, err
	}
	type job struct{ dir, pkg, out, platform string }
	jobs := []job{{lf, "./internal/tool", s.Tool, Host()}, {other, ".", s.Other, Host()}, {other, ".", s.OtherArm64, "linux/arm64"}}
	for _, pl := range []string{Host(), "linux/arm64", "android/arm64"} {
		s.Lesfarm[pl] = filepath.Join(dir, "lesfarm-"+strings.ReplaceAll(pl, "/", "-"))
		jobs = append(jobs, job{lf, "./cmd/lesfarm", s.Lesfarm[pl], pl})
	}
	for _, j := range jobs {
		if err := goBuild(j.dir, j.pkg, j.out, j.platform, "-trimpath", "-buildvcs=false"); err != nil {
			return nil, err
		}
	}
	// A git checkout, stamped: -buildvcs=true on the command line beats a
	// GOFLAGS=-buildvcs=false in the environment.
	git := func(args ...string) (string, error) {
		return run(lf, "git", append([]string{"-c", "user.name=t", "-c", "user.email=t@example.com", "-c", "commit.gpgsign=false"}, args...)...)
	}
	for _, args := range [][]string{{"init", "-q"}, {"add", "."}, {"commit", "-q", "-m", "fixture"}} {
		if _, err := git(args...); err != nil {
			return nil, err
		}
	}
	var err error
	if s.Revision, err = git("rev-parse", "HEAD"); err != nil {
		return nil, err
	}
	if err := goBuild(lf, "./cmd/lesfarm", s.Clean, Host(), "-buildvcs=true"); err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(lf, "cmd/lesfarm/extra.go"), []byte("package main\n\nvar extra = 1\n"), 0o644); err != nil {
		return nil, err
	}
	return s, goBuild(lf, "./cmd/lesfarm", s.Dirty, Host(), "-buildvcs=true")
}

func writeFiles(dir string, files map[string]string) error {
	for name, body := range files {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			return err
		}
	}
	return nil
}

// goBuild builds pkg in dir into out for platform with CGO_ENABLED=0.
func goBuild(dir, pkg, out, platform string, flags ...string) error {
	goos, goarch, _ := strings.Cut(platform, "/")
	cmd := exec.Command("go", append(append([]string{"build", "-o", out}, flags...), pkg)...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS="+goos, "GOARCH="+goarch)
	if b, err := cmd.CombinedOutput(); err != nil {
		return errors.New(strings.TrimSpace(string(b)))
	}
	return nil
}

func run(dir, name string, args ...string) (string, error) {
	cmd := exec.Command(name, args...)
	cmd.Dir = dir
	b, err := cmd.CombinedOutput()
	if err != nil {
		return "", errors.New(strings.TrimSpace(string(b)))
	}
	return strings.TrimSpace(string(b)), nil
}

// Register registers each of ids, unless already registered, as a pushed
// build of lineage main with one linux/amd64 executable whose artifact is
// a metadata row without a file: for tests that trigger runs of a build
// through the API (which refuses unregistered builds) and never execute
// it. It fails the test on any error.
func Register(t testing.TB, st *store.Store, ids ...string) {
	t.Helper()
	ctx := context.Background()
	for _, id := range ids {
		sum := sha256.Sum256([]byte("buildstest:" + id))
		sha := hex.EncodeToString(sum[:])
		if _, err := st.PutArtifact(ctx, sha, 1, "buildstest-"+id); err != nil {
			t.Fatalf("buildstest: register %s: %v", id, err)
		}
		if _, _, err := st.CreateBuild(ctx, &store.CreateBuildParams{ID: id, PushedBy: "buildstest",
			Executables: []store.Executable{{Platform: "linux/amd64", SHA256: sha, Size: 1}}}); err != nil {
			t.Fatalf("buildstest: register %s: %v", id, err)
		}
	}
}
