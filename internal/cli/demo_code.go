package cli

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"time"

	"github.com/lesfarm/lesfarm/coordinator/api/client"

	"github.com/lesfarm/lesfarm/runtime/expert"
)

// demoCode is the code the demo benchmarks: two lesfarm executables
// compiled from the source tree at the start, the baseline and a build
// whose runtime was linked with lookahead turned off
// (expert.LookaheadVariantFlag). They differ in code, so in sha256.
type demoCode struct {
	base, variant string // executables
	took          time.Duration
}

// compileDemoCode compiles the demo's two builds from src into dir with
// the settings of `make build` (the Go build cache then makes each one a
// link step), printing the time it took.
func (d *demoFarm) compileDemoCode(ctx context.Context, src, dir string) (*demoCode, error) {
	t0 := time.Now()
	platform := runtime.GOOS + "/" + runtime.GOARCH
	c := &demoCode{base: filepath.Join(dir, "lesfarm-baseline"), variant: filepath.Join(dir, "lesfarm-no-lookahead")}
	d.say("compiling the builds under test from %s (%s): the baseline, and one linked with lookahead turned off (%s)", src, platform, expert.LookaheadVariantFlag)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("demo: %w", err)
	}
	if err := demoCompile(ctx, src, "", c.base); err != nil {
		return nil, fmt.Errorf("demo: compile the baseline: %w", err)
	}
	if err := demoCompile(ctx, src, expert.LookaheadVariantFlag, c.variant); err != nil {
		return nil, fmt.Errorf("demo: compile the lookahead-off build: %w", err)
	}
	c.took = time.Since(t0)
	d.say("compiled both builds in %.1f s", c.took.Seconds())
	return c, nil
}

// demoSource returns the lesfarm source tree the demo compiles: dir when
// given, else the module root above the working directory.
func demoSource(dir string) (string, error) {
	if dir != "" {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err != nil {
			return "", usagef("demo: --source %s is not a Go module (no go.mod)", dir)
		}
		return dir, nil
	}
	wd, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for d := wd; ; d = filepath.Dir(d) {
		if b, err := os.ReadFile(filepath.Join(d, "go.mod")); err == nil && strings.Contains(string(b), "module github.com/lesfarm/lesfarm\n") {
			return d, nil
		}
		if filepath.Dir(d) == d {
			return "", errors.New("demo: the demo compiles its builds from the lesfarm source tree: run it inside a checkout or pass --source DIR")
		}
	}
}

// demoCompile builds ./cmd/lesfarm of src into out with the settings of
// `make build` plus ldflags: unlike `build push --from-source`
// (compileBuild) it does not pass -trimpath, which would compile every
// package anew instead of reusing what `make build` left in the Go build
// cache; the demo's builds are then two link steps.
func demoCompile(ctx context.Context, src, ldflags, out string) error {
	args := []string{"build", "-o", out}
	if ldflags != "" {
		args = append(args, "-ldflags", ldflags)
	}
	cmd := exec.CommandContext(ctx, goCommand(), append(args, "./cmd/lesfarm")...)
	cmd.Dir = src
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if b, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("go %s: %v\n%s", strings.Join(args, " "), err, b)
	}
	return nil
}

// pushBuild registers build n of the demo's lineage through the REST API,
// as CI would: the executable is uploaded (once: the store is
// content-addressed) and pushed under the id <lineage>-b<n>.
func (d *demoFarm) pushBuild(ctx context.Context, lineage string, n int, exe, what string) error {
	id := fmt.Sprintf("%s-b%d", lineage, n)
	sum, size, err := fileDigest(exe)
	if err != nil {
		return fmt.Errorf("demo: %w", err)
	}
	f, err := os.Open(exe)
	if err != nil {
		return fmt.Errorf("demo: %w", err)
	}
	defer f.Close()
	if _, _, err := d.cl.UploadArtifact(ctx, f, size, filepath.Base(exe), sum); err != nil {
		return fmt.Errorf("demo: upload %s: %w", exe, err)
	}
	platform := runtime.GOOS + "/" + runtime.GOARCH
	if _, _, err := d.cl.PushBuild(ctx, &client.PushBuildRequest{ID: id, Lineage: lineage,
		Executables: []client.PushExecutable{{Platform: platform, SHA256: sum}}}); err != nil {
		return fmt.Errorf("demo: push build %s: %w", id, err)
	}
	d.say("pushed build %s: %s, %s sha256 %s", id, what, platform, sum[:12])
	return nil
}

// fileDigest returns the sha256 and size of the file at path.
func fileDigest(path string) (string, int64, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", 0, err
	}
	defer f.Close()
	h := sha256.New()
	n, err := io.Copy(h, f)
	if err != nil {
		return "", 0, err
	}
	return hex.EncodeToString(h.Sum(nil)), n, nil
}
