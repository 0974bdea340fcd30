package builds_test

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"

	"github.com/lesfarm/lesfarm/coordinator/builds"
	"github.com/lesfarm/lesfarm/coordinator/builds/buildstest"
)

var (
	setOnce sync.Once
	set     *buildstest.Set
)

// getSet compiles the test executables once per test binary.
func getSet(t *testing.T) *buildstest.Set {
	t.Helper()
	setOnce.Do(func() { set = buildstest.New(&onceTB{T: t}) })
	if set == nil {
		t.Fatal("the test executables could not be built (see the first test that tried)")
	}
	return set
}

// onceTB is a testing.TB whose TempDir outlives the test that built the
// shared set (it is removed by TestMain).
type onceTB struct{ *testing.T }

var setDir string

func (o *onceTB) TempDir() string {
	if setDir == "" {
		d, err := os.MkdirTemp("", "builds-test-")
		if err != nil {
			o.Fatal(err)
		}
		setDir = d
	}
	return setDir
}

func TestMain(m *testing.M) {
	code := m.Run()
	if setDir != "" {
		os.RemoveAll(setDir)
	}
	os.Exit(code)
}

func run(dir string, name string, args ...string) (string, error) {
	cmd := exec.Command(name, args...)
	cmd.Dir = dir
	b, err := cmd.CombinedOutput()
	if err != nil {
		return "", errors.New(string(b))
	}
	return strings.TrimSpace(string(b)), nil
}

// TestInspect: real executables against the registration rules; every
// refusal wraps builds.ErrRefused and is one line.
func TestInspect(t *testing.T) {
	t.Parallel()
	f := getSet(t)
	host := buildstest.Host()
	self, err := os.Executable() // this test binary: module lesfarm, package coordinator/builds.test
	if err != nil {
		t.Fatal(err)
	}
	whole, err := os.ReadFile(f.Lesfarm[host])
	if err != nil {
		t.Fatal(err)
	}
	truncated := filepath.Join(t.TempDir(), "truncated")
	if err := os.WriteFile(truncated, whole[:len(whole)/3], 0o755); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name         string
		path         string
		wantPlatform string
		wantRev      string
		wantModified bool
		wantErr      string // substring; "" means accepted
	}{
		{"lesfarm host", f.Lesfarm[host], host, "", false, ""},
		{"lesfarm cross-compiled", f.Lesfarm["linux/arm64"], "linux/arm64", "", false, ""},
		{"lesfarm android", f.Lesfarm["android/arm64"], "android/arm64", "", false, ""},
		{"stamped clean", f.Clean, host, f.Revision, false, ""},
		{"stamped dirty", f.Dirty, host, f.Revision, true, ""},
		{"other module", f.Other, "", "", false, "a Go executable of module example.com/other (package example.com/other), not of github.com/lesfarm/lesfarm"},
		{"other module cross-compiled", f.OtherArm64, "", "", false, "module example.com/other"},
		{"lesfarm module, other package", f.Tool, "", "", false, "built from package github.com/lesfarm/lesfarm/internal/tool, not github.com/lesfarm/lesfarm/cmd/lesfarm"},
		{"test binary of the module", self, "", "", false, "built from package github.com/lesfarm/lesfarm/coordinator/builds.test"},
		{"not a Go file", f.NotGo, "", "", false, "not a Go executable"},
		{"truncated", truncated, "", "", false, "not a Go executable"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			info, err := builds.InspectFile(tc.path)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) || !errors.Is(err, builds.ErrRefused) || strings.Contains(err.Error(), "\n") {
					t.Fatalf("builds.InspectFile = %+v, %v; want a one-line builds.ErrRefused containing %q", info, err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if info.Platform != tc.wantPlatform || info.Revision != tc.wantRev || info.Modified != tc.wantModified ||
				info.Module != builds.ModulePath || info.MainPackage != builds.MainPackage || !strings.HasPrefix(info.GoVersion, "go") {
				t.Fatalf("builds.InspectFile = %+v; want platform %s, revision %q, modified %v", info, tc.wantPlatform, tc.wantRev, tc.wantModified)
			}
		})
	}
}

// TestReadCrossCompiled: Read takes GOOS/GOARCH from the build settings
// of a binary this machine cannot run, whatever its module.
func TestReadCrossCompiled(t *testing.T) {
	t.Parallel()
	b, err := os.ReadFile(getSet(t).OtherArm64)
	if err != nil {
		t.Fatal(err)
	}
	info, err := builds.Read(bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	if info.Platform != "linux/arm64" || info.Module != "example.com/other" || info.Settings["CGO_ENABLED"] != "0" {
		t.Fatalf("builds.Read = %+v", info)
	}
}

// TestInspectRealLesfarm builds the real ./cmd/lesfarm of this module and
// inspects it: the rule must accept the farm's own binary.
func TestInspectRealLesfarm(t *testing.T) {
	if testing.Short() {
		t.Skip("compiles ./cmd/lesfarm")
	}
	t.Parallel()
	root, err := run(".", "go", "list", "-m", "-f", "{{.Dir}}")
	if err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(t.TempDir(), "lesfarm")
	// Without -trimpath, so the build cache of make build and the other
	// packages' tests makes this a link step.
	if _, err := run(root, "go", "build", "-o", out, "./cmd/lesfarm"); err != nil {
		t.Fatalf("go build ./cmd/lesfarm: %v", err)
	}
	info, err := builds.InspectFile(out)
	if err != nil {
		t.Fatal(err)
	}
	if info.Platform != runtime.GOOS+"/"+runtime.GOARCH {
		t.Fatalf("platform %s", info.Platform)
	}
}

// TestNoRuntimeDependency: the coordinator accepts builds without linking
// the runtime (tensor kernels, model code).
func TestNoRuntimeDependency(t *testing.T) {
	t.Parallel()
	deps, err := run(".", "go", "list", "-deps", ".")
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range strings.Fields(deps) {
		if strings.HasPrefix(d, builds.ModulePath+"/") && d != builds.ModulePath+"/coordinator/builds" {
			t.Errorf("coordinator/builds depends on %s", d)
		}
	}
}

// FuzzRead: arbitrary bytes never panic Read or Inspect, and every error
// is a one-line refusal.
func FuzzRead(f *testing.F) {
	f.Add([]byte("#!/bin/sh\n"))
	f.Add([]byte("\x7fELF\x02\x01\x01\x00"))
	f.Add([]byte("MZ\x90\x00"))
	f.Add([]byte("\xcf\xfa\xed\xfe"))
	f.Add([]byte("\x00asm\x01\x00\x00\x00"))
	if b, err := os.ReadFile(os.Args[0]); err == nil && len(b) > 4096 {
		f.Add(b[:4096])
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		info, err := builds.Inspect(bytes.NewReader(b))
		if err == nil {
			if info == nil || info.Module != builds.ModulePath {
				t.Fatalf("accepted %+v", info)
			}
			return
		}
		if !errors.Is(err, builds.ErrRefused) || strings.Contains(err.Error(), "\n") {
			t.Fatalf("error %q is not a one-line refusal", err)
		}
	})
}
