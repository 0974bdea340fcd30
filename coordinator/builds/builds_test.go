package builds

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
)

// fixtures are real executables built once per test binary by go build
// (cheap with the build cache): tiny programs in throwaway modules, one of
// which claims the lesfarm module path and main package, so the rules are
// tested on real build information without compiling the whole farm.
type fixtures struct {
	lesfarm      string // module github.com/lesfarm/lesfarm, ./cmd/lesfarm, host platform, no VCS
	lesfarmArm64 string // the same, GOOS=linux GOARCH=arm64
	clean        string // ./cmd/lesfarm in a git repo, stamped (vcs.modified=false)
	dirty        string // the same tree with an uncommitted change
	cleanRev     string // the commit of clean and dirty
	other        string // module example.com/other
	otherArm64   string // the same, GOOS=linux GOARCH=arm64
	tool         string // module github.com/lesfarm/lesfarm, package internal/tool
}

var (
	fixOnce sync.Once
	fix     fixtures
	fixErr  error
	fixDir  string
)

func TestMain(m *testing.M) {
	code := m.Run()
	if fixDir != "" {
		os.RemoveAll(fixDir)
	}
	os.Exit(code)
}

func getFixtures(t *testing.T) *fixtures {
	t.Helper()
	fixOnce.Do(func() { fixErr = buildFixtures() })
	if fixErr != nil {
		t.Fatalf("building test executables: %v", fixErr)
	}
	return &fix
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

// goBuild builds pkg in dir into out with extra environment and flags.
func goBuild(dir, pkg, out string, env []string, flags ...string) error {
	args := append([]string{"build", "-o", out}, flags...)
	cmd := exec.Command("go", append(args, pkg)...)
	cmd.Dir = dir
	cmd.Env = append(append(os.Environ(), "CGO_ENABLED=0"), env...)
	if b, err := cmd.CombinedOutput(); err != nil {
		return errors.New(string(b))
	}
	return nil
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

const mainGo = "package main\n\nfunc main() { println(\"hi\") }\n"

func buildFixtures() error {
	var err error
	if fixDir, err = os.MkdirTemp("", "builds-test-"); err != nil {
		return err
	}
	lf := filepath.Join(fixDir, "lf")
	if err := writeFiles(lf, map[string]string{"go.mod": "module github.com/lesfarm/lesfarm\n\ngo 1.22\n",
		"cmd/lesfarm/main.go": mainGo, "internal/tool/main.go": mainGo}); err != nil {
		return err
	}
	other := filepath.Join(fixDir, "other")
	if err := writeFiles(other, map[string]string{"go.mod": "module example.com/other\n\ngo 1.22\n", "main.go": mainGo}); err != nil {
		return err
	}
	arm := []string{"GOOS=linux", "GOARCH=arm64"}
	fix = fixtures{
		lesfarm: filepath.Join(fixDir, "lesfarm"), lesfarmArm64: filepath.Join(fixDir, "lesfarm-arm64"),
		other: filepath.Join(fixDir, "other.bin"), otherArm64: filepath.Join(fixDir, "other-arm64"), tool: filepath.Join(fixDir, "tool"),
		clean: filepath.Join(fixDir, "clean"), dirty: filepath.Join(fixDir, "dirty"),
	}
	for _, b := range []struct {
		dir, pkg, out string
		env           []string
	}{
		{lf, "./cmd/lesfarm", fix.lesfarm, nil},
		{lf, "./cmd/lesfarm", fix.lesfarmArm64, arm},
		{lf, "./internal/tool", fix.tool, nil},
		{other, ".", fix.other, nil},
		{other, ".", fix.otherArm64, arm},
	} {
		if err := goBuild(b.dir, b.pkg, b.out, b.env, "-trimpath", "-buildvcs=false"); err != nil {
			return err
		}
	}
	// A git checkout, stamped: -buildvcs=true on the command line beats
	// a GOFLAGS=-buildvcs=false in the environment.
	git := func(args ...string) (string, error) {
		return run(lf, "git", append([]string{"-c", "user.name=t", "-c", "user.email=t@example.com", "-c", "commit.gpgsign=false"}, args...)...)
	}
	for _, args := range [][]string{{"init", "-q"}, {"add", "."}, {"commit", "-q", "-m", "fixture"}} {
		if _, err := git(args...); err != nil {
			return err
		}
	}
	if fix.cleanRev, err = git("rev-parse", "HEAD"); err != nil {
		return err
	}
	if err := goBuild(lf, "./cmd/lesfarm", fix.clean, nil, "-buildvcs=true"); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(lf, "cmd/lesfarm/extra.go"), []byte("package main\n\nvar extra = 1\n"), 0o644); err != nil {
		return err
	}
	return goBuild(lf, "./cmd/lesfarm", fix.dirty, nil, "-buildvcs=true")
}

// TestInspect: real executables against the registration rules; every
// refusal wraps ErrRefused and is one line.
func TestInspect(t *testing.T) {
	t.Parallel()
	f := getFixtures(t)
	host := runtime.GOOS + "/" + runtime.GOARCH
	self, err := os.Executable() // this test binary: module lesfarm, package coordinator/builds.test
	if err != nil {
		t.Fatal(err)
	}
	notGo := filepath.Join(t.TempDir(), "script.sh")
	if err := os.WriteFile(notGo, []byte("#!/bin/sh\necho lesfarm\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	whole, err := os.ReadFile(f.lesfarm)
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
		{"lesfarm host", f.lesfarm, host, "", false, ""},
		{"lesfarm cross-compiled", f.lesfarmArm64, "linux/arm64", "", false, ""},
		{"stamped clean", f.clean, host, f.cleanRev, false, ""},
		{"stamped dirty", f.dirty, host, f.cleanRev, true, ""},
		{"other module", f.other, "", "", false, "a Go executable of module example.com/other (package example.com/other), not of github.com/lesfarm/lesfarm"},
		{"other module cross-compiled", f.otherArm64, "", "", false, "module example.com/other"},
		{"lesfarm module, other package", f.tool, "", "", false, "built from package github.com/lesfarm/lesfarm/internal/tool, not github.com/lesfarm/lesfarm/cmd/lesfarm"},
		{"test binary of the module", self, "", "", false, "built from package github.com/lesfarm/lesfarm/coordinator/builds.test"},
		{"not a Go file", notGo, "", "", false, "not a Go executable"},
		{"truncated", truncated, "", "", false, "not a Go executable"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			info, err := InspectFile(tc.path)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) || !errors.Is(err, ErrRefused) || strings.Contains(err.Error(), "\n") {
					t.Fatalf("InspectFile = %+v, %v; want a one-line ErrRefused containing %q", info, err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if info.Platform != tc.wantPlatform || info.Revision != tc.wantRev || info.Modified != tc.wantModified ||
				info.Module != ModulePath || info.MainPackage != MainPackage || !strings.HasPrefix(info.GoVersion, "go") {
				t.Fatalf("InspectFile = %+v; want platform %s, revision %q, modified %v", info, tc.wantPlatform, tc.wantRev, tc.wantModified)
			}
		})
	}
}

// TestReadCrossCompiled: Read takes GOOS/GOARCH from the build settings of
// a binary this machine cannot run, whatever its module.
func TestReadCrossCompiled(t *testing.T) {
	t.Parallel()
	f := getFixtures(t)
	b, err := os.ReadFile(f.otherArm64)
	if err != nil {
		t.Fatal(err)
	}
	info, err := Read(bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	if info.Platform != "linux/arm64" || info.Module != "example.com/other" || info.Settings["CGO_ENABLED"] != "0" {
		t.Fatalf("Read = %+v", info)
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
	if err := goBuild(root, "./cmd/lesfarm", out, nil, "-trimpath"); err != nil {
		t.Fatalf("go build ./cmd/lesfarm: %v", err)
	}
	info, err := InspectFile(out)
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
		if strings.HasPrefix(d, ModulePath+"/") && d != ModulePath+"/coordinator/builds" {
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
		info, err := Inspect(bytes.NewReader(b))
		if err == nil {
			if info == nil || info.Module != ModulePath {
				t.Fatalf("accepted %+v", info)
			}
			return
		}
		if !errors.Is(err, ErrRefused) || strings.Contains(err.Error(), "\n") {
			t.Fatalf("error %q is not a one-line refusal", err)
		}
	})
}
