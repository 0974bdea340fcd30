package cli

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/lesfarm/lesfarm/coordinator/api/client"
	"github.com/lesfarm/lesfarm/coordinator/builds"
)

func init() { register("build", newBuildCmd) }

func newBuildCmd(env *Env) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "build push|list|show",
		Short: "Register builds under test with the coordinator and list them",
		Long: `build manages the coordinator's build registry. A build is code, not a
label: an id (e.g. ci-4812) naming one lesfarm executable per platform
(linux/amd64, linux/arm64, android/arm64, ...), each stored by sha256 in the
artifact store. Builds are immutable, belong to a lineage (branch, default
main) and are ordered in it by push order. 'lesfarm run --build ID' runs a
registered build; an id that is not registered is refused.

See docs/builds.md.`,
	}
	cmd.AddCommand(newBuildPushCmd(env), newBuildListCmd(env), newBuildShowCmd(env))
	return cmd
}

// pushOptions are the flags of build push.
type pushOptions struct {
	lineage, gitSHA, after string
	fromSource, ldflags    string
	platforms              []string
	format                 string
	keep                   string // directory that keeps the compiled executables
}

func newBuildPushCmd(env *Env) *cobra.Command {
	var sf serverFlags
	var o pushOptions
	cmd := &cobra.Command{
		Use:   "push ID FILE... | push ID --from-source DIR [--platforms linux/amd64,linux/arm64]",
		Short: "Upload a build's executables and register it under ID",
		Long: `push registers build ID. Each FILE is a lesfarm executable (go build
./cmd/lesfarm) for one platform; its platform (GOOS/GOARCH) and the
revision it was built from are read from its Go build information without
running it, so binaries for any platform can be pushed from any machine.
Each file is checked locally, uploaded to the artifact store (resumable,
sha256-verified; content already stored is not sent again) and the build
is then registered.

With --from-source DIR, push first cross-compiles ./cmd/lesfarm in the
lesfarm checkout DIR for each of --platforms (default: this machine's),
with CGO_ENABLED=0 and -trimpath (and --ldflags when given), and prints
the compile time.

The coordinator refuses, with a one-line message and exit code 2, a file
that is not a lesfarm binary, a platform mismatch, executables of
different revisions, a --git-sha that contradicts the executables'
vcs.revision (a prefix is enough) and an ID already registered with other
content. Pushing the same build again is not an error. A binary built
from a tree with uncommitted changes is accepted and flagged dirty.`,
		Example: `  # in CI, after go build:
  lesfarm build push ci-4812 out/lesfarm-linux-arm64 out/lesfarm-android-arm64 --git-sha $GIT_COMMIT
  # compile and push from a checkout:
  lesfarm build push ci-4813 --from-source . --platforms linux/amd64,android/arm64
  # a fix for an older build of a release branch, ordered right after it:
  lesfarm build push rel-1.3.1 out/lesfarm --after rel-1.3`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return runBuildPush(env, &sf, &o, args[0], args[1:], cmd.Flags().Changed("platforms"))
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.lineage, "lineage", "", "build lineage (branch); default: --after's lineage, else main")
	f.StringVar(&o.gitSHA, "git-sha", "", "git commit the build claims (checked against the executables' vcs.revision)")
	f.StringVar(&o.after, "after", "", "order the build right after this build of its lineage instead of last")
	f.StringVar(&o.fromSource, "from-source", "", "compile ./cmd/lesfarm in this lesfarm checkout instead of pushing FILEs")
	f.StringSliceVar(&o.platforms, "platforms", []string{hostPlatform()}, "with --from-source: GOOS/GOARCH list to compile for")
	f.StringVar(&o.ldflags, "ldflags", "", "with --from-source: extra -ldflags for go build (e.g. -X pkg.Var=value)")
	f.StringVar(&o.keep, "out", "", "with --from-source: keep the compiled executables in this directory (default: a temporary one)")
	f.StringVar(&o.format, "format", "table", "output format: table or json")
	addServerFlags(cmd, &sf)
	return cmd
}

func runBuildPush(env *Env, sf *serverFlags, o *pushOptions, id string, files []string, platformsSet bool) error {
	if err := checkFormat("build push", o.format); err != nil {
		return err
	}
	if !builds.ValidID(id) {
		return usagef("build push: build id %q: use 1 to %d letters, digits, '.', '_' and '-', starting with a letter or digit", id, builds.MaxIDLen)
	}
	switch {
	case o.fromSource != "" && len(files) > 0:
		return usagef("build push: give FILEs or --from-source, not both")
	case o.fromSource == "" && len(files) == 0:
		return usagef("build push: give the executables (FILE...) or --from-source DIR")
	case o.fromSource == "" && (platformsSet || o.ldflags != "" || o.keep != ""):
		return usagef("build push: --platforms, --ldflags and --out need --from-source")
	}
	if o.fromSource != "" {
		compiled, cleanup, err := compileForPush(env, o)
		if err != nil {
			return err
		}
		defer cleanup()
		files = compiled
	}
	exes := make([]pushFile, 0, len(files))
	for _, path := range files {
		info, err := builds.InspectFile(path)
		if errors.Is(err, builds.ErrRefused) {
			return usagef("build push: %s: %v", path, err)
		}
		if err != nil {
			return fmt.Errorf("build push: %w", err)
		}
		if i := slices.IndexFunc(exes, func(e pushFile) bool { return e.info.Platform == info.Platform }); i >= 0 {
			return usagef("build push: %s and %s are both %s executables; a build has one per platform", exes[i].path, path, info.Platform)
		}
		exes = append(exes, pushFile{path: path, info: info})
	}
	// The coordinator checks again; checking here first saves the uploads.
	local := make([]builds.Executable, len(exes))
	for i, e := range exes {
		local[i] = builds.Executable{Platform: e.info.Platform, Info: e.info}
	}
	if _, err := builds.Check(o.gitSHA, local); err != nil {
		return usagef("build push: %v", err)
	}
	c, err := sf.client()
	if err != nil {
		return err
	}
	req := &client.PushBuildRequest{ID: id, Lineage: o.lineage, GitSHA: o.gitSHA, After: o.after}
	for _, e := range exes {
		sha, err := uploadExecutable(env, c, e)
		if err != nil {
			return err
		}
		req.Executables = append(req.Executables, client.PushExecutable{Platform: e.info.Platform, SHA256: sha})
	}
	b, created, err := c.PushBuild(env.Ctx, req)
	var p *client.Problem
	if errors.As(err, &p) && p.Status == http.StatusUnprocessableEntity {
		return &ExitError{Code: 2, Msg: "build push: " + strings.TrimSpace(p.Detail)}
	}
	if err != nil {
		return fmt.Errorf("build push: %w", err)
	}
	if created {
		fmt.Fprintf(env.Stderr, "registered build %s: %s #%d, %d executable(s)%s\n", b.ID, b.Lineage, b.Position, len(b.Executables), dirtyNote(b.Dirty))
	} else {
		fmt.Fprintf(env.Stderr, "build %s was already registered with the same executables\n", b.ID)
	}
	return printBuild(env.Stdout, o.format, b)
}

func dirtyNote(dirty bool) string {
	if dirty {
		return " (dirty: built from a tree with uncommitted changes)"
	}
	return ""
}

// pushFile is an executable about to be pushed.
type pushFile struct {
	path string
	info *builds.Info
}

// uploadExecutable hashes e and uploads it (the server checks the digest)
// and returns its sha256.
func uploadExecutable(env *Env, c *client.Client, e pushFile) (string, error) {
	f, err := os.Open(e.path)
	if err != nil {
		return "", fmt.Errorf("build push: %w", err)
	}
	defer f.Close()
	h := sha256.New()
	size, err := io.Copy(h, f)
	if err != nil {
		return "", fmt.Errorf("build push: %s: %w", e.path, err)
	}
	sum := hex.EncodeToString(h.Sum(nil))
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return "", fmt.Errorf("build push: %w", err)
	}
	_, created, err := c.UploadArtifact(env.Ctx, f, size, filepath.Base(e.path), sum)
	if err != nil {
		return "", fmt.Errorf("build push: upload %s: %w", e.path, err)
	}
	state := "uploaded"
	if !created {
		state = "already stored"
	}
	fmt.Fprintf(env.Stderr, "%s %s: %s (%d bytes, sha256 %s)\n", e.info.Platform, e.path, state, size, sum[:12])
	return sum, nil
}

// compileForPush compiles ./cmd/lesfarm in o.fromSource for each of
// o.platforms into o.keep, or a temporary directory that cleanup removes,
// and returns the executables' paths.
func compileForPush(env *Env, o *pushOptions) (files []string, cleanup func(), err error) {
	if _, err := os.Stat(filepath.Join(o.fromSource, "cmd", "lesfarm")); err != nil {
		return nil, nil, usagef("build push: --from-source %s is not a lesfarm checkout (no cmd/lesfarm)", o.fromSource)
	}
	for _, pl := range o.platforms {
		if goos, goarch, ok := strings.Cut(pl, "/"); !ok || goos == "" || goarch == "" || strings.Contains(goarch, "/") {
			return nil, nil, usagef("build push: --platforms %q: want GOOS/GOARCH, e.g. linux/arm64", pl)
		}
	}
	dir, cleanup := o.keep, func() {}
	if dir == "" {
		if dir, err = os.MkdirTemp("", "lesfarm-build-"); err != nil {
			return nil, nil, fmt.Errorf("build push: %w", err)
		}
		cleanup = func() { _ = os.RemoveAll(dir) }
	} else if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, nil, fmt.Errorf("build push: %w", err)
	}
	var total time.Duration
	for _, pl := range o.platforms {
		out := filepath.Join(dir, "lesfarm-"+strings.ReplaceAll(pl, "/", "-"))
		took, err := compileBuild(env.Ctx, o.fromSource, pl, o.ldflags, out)
		if err != nil {
			cleanup()
			return nil, nil, fmt.Errorf("build push: %w", err)
		}
		total += took
		fmt.Fprintf(env.Stderr, "compiled %s in %.1f s\n", pl, took.Seconds())
		files = append(files, out)
	}
	fmt.Fprintf(env.Stderr, "compile time: %.1f s for %d platform(s)\n", total.Seconds(), len(o.platforms))
	return files, cleanup, nil
}

// hostPlatform is this machine's GOOS/GOARCH.
func hostPlatform() string { return runtime.GOOS + "/" + runtime.GOARCH }

// compileBuild cross-compiles ./cmd/lesfarm of the lesfarm checkout srcDir
// for platform (GOOS/GOARCH) into outPath with CGO_ENABLED=0, -trimpath
// and, when not empty, -ldflags ldflags, and returns how long the
// compilation took. VCS stamping follows the environment (GOFLAGS): a
// machine that sets -buildvcs=false stamps no revision, and the build's
// identity is its sha256 regardless.
func compileBuild(ctx context.Context, srcDir, platform, ldflags, outPath string) (time.Duration, error) {
	goos, goarch, ok := strings.Cut(platform, "/")
	if !ok || goos == "" || goarch == "" || strings.Contains(goarch, "/") {
		return 0, fmt.Errorf("compile: platform %q is not GOOS/GOARCH", platform)
	}
	abs, err := filepath.Abs(outPath)
	if err != nil {
		return 0, fmt.Errorf("compile: %w", err)
	}
	args := []string{"build", "-trimpath", "-o", abs}
	if ldflags != "" {
		args = append(args, "-ldflags", ldflags)
	}
	cmd := exec.CommandContext(ctx, goCommand(), append(args, "./cmd/lesfarm")...)
	cmd.Dir = srcDir
	cmd.Env = append(os.Environ(), "GOOS="+goos, "GOARCH="+goarch, "CGO_ENABLED=0")
	t0 := time.Now()
	out, err := cmd.CombinedOutput()
	took := time.Since(t0)
	if err != nil {
		msg := strings.Join(strings.Fields(lastLines(string(out), 3)), " ")
		return took, fmt.Errorf("compile ./cmd/lesfarm for %s: %v: %s", platform, err, msg)
	}
	return took, nil
}

// goTool is the go command: the one on PATH, else the toolchain's.
func goCommand() string {
	if p, err := exec.LookPath("go"); err == nil {
		return p
	}
	return filepath.Join(runtime.GOROOT(), "bin", "go")
}

// lastLines returns the last n lines of s.
func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

func checkFormat(what, format string) error {
	if format != "table" && format != "json" {
		return usagef("%s: --format %q: want table or json", what, format)
	}
	return nil
}

func newBuildListCmd(env *Env) *cobra.Command {
	var sf serverFlags
	var lineage, format string
	var limit int
	cmd := &cobra.Command{
		Use:   "list [--lineage L] [--limit N] [--format table|json]",
		Short: "List registered builds",
		Long: `list prints registered builds: with --lineage, that lineage's builds
newest (highest position) first; without it, every build (pushed and the
agents' embedded ones) most recently pushed first.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := checkFormat("build list", format); err != nil {
				return err
			}
			if limit < 1 || limit > 1000 {
				return usagef("build list: --limit %d: want 1 to 1000", limit)
			}
			c, err := sf.client()
			if err != nil {
				return err
			}
			bs, err := c.ListBuilds(env.Ctx, lineage, limit)
			if err != nil {
				return fmt.Errorf("build list: %w", err)
			}
			if format == "json" {
				return writeJSON(env.Stdout, nonNilBuilds(bs))
			}
			tw := tabwriter.NewWriter(env.Stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "ID\tLINEAGE\tPOS\tKIND\tGIT SHA\tDIRTY\tPLATFORMS\tRUNS\tALERTS\tPUSHED\tBY")
			for _, b := range bs {
				platforms := make([]string, len(b.Executables))
				for i, e := range b.Executables {
					platforms[i] = e.Platform
				}
				fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\t%s\t%s\t%d\t%d\t%s\t%s\n", b.ID, b.Lineage, b.Position, b.Kind, dash(shortRev(b.GitSHA)),
					yesNo(b.Dirty), dash(strings.Join(platforms, ",")), b.Runs, b.Alerts, b.PushedAt.UTC().Format(time.RFC3339), dash(b.PushedBy))
			}
			return tw.Flush()
		},
	}
	cmd.Flags().StringVar(&lineage, "lineage", "", "only this lineage's builds")
	cmd.Flags().IntVar(&limit, "limit", 50, "at most this many builds (1 to 1000)")
	cmd.Flags().StringVar(&format, "format", "table", "output format: table or json")
	addServerFlags(cmd, &sf)
	return cmd
}

func newBuildShowCmd(env *Env) *cobra.Command {
	var sf serverFlags
	var format string
	cmd := &cobra.Command{
		Use:   "show ID [--format table|json]",
		Short: "Show a build: its lineage, position, git sha and executables",
		Long: `show prints build ID: lineage and position, git sha, who pushed it and
when, its runs and regression alert groups, and each executable's platform,
sha256, size, Go version, revision and dirty flag. An unknown ID fails
with the nearest registered ids.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := checkFormat("build show", format); err != nil {
				return err
			}
			c, err := sf.client()
			if err != nil {
				return err
			}
			b, err := c.GetBuild(env.Ctx, args[0])
			var p *client.Problem
			if errors.As(err, &p) && p.Status == http.StatusNotFound {
				return &ExitError{Code: 1, Msg: "build show: " + strings.TrimSpace(p.Detail)}
			}
			if err != nil {
				return fmt.Errorf("build show: %w", err)
			}
			return printBuild(env.Stdout, format, b)
		},
	}
	cmd.Flags().StringVar(&format, "format", "table", "output format: table or json")
	addServerFlags(cmd, &sf)
	return cmd
}

// printBuild writes one build as a table (its fields, then its
// executables) or as JSON.
func printBuild(w io.Writer, format string, b *client.Build) error {
	if format == "json" {
		return writeJSON(w, b)
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "BUILD\t%s\n", b.ID)
	fmt.Fprintf(tw, "LINEAGE\t%s #%d\n", b.Lineage, b.Position)
	fmt.Fprintf(tw, "KIND\t%s\n", b.Kind)
	fmt.Fprintf(tw, "GIT SHA\t%s\n", dash(b.GitSHA))
	fmt.Fprintf(tw, "DIRTY\t%s\n", yesNo(b.Dirty))
	fmt.Fprintf(tw, "PUSHED\t%s by %s\n", b.PushedAt.UTC().Format(time.RFC3339), dash(b.PushedBy))
	fmt.Fprintf(tw, "RUNS\t%d\n", b.Runs)
	fmt.Fprintf(tw, "ALERTS\t%d\n", b.Alerts)
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintln(w)
	tw = tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "PLATFORM\tSHA256\tSIZE\tGO\tREVISION\tDIRTY")
	for _, e := range b.Executables {
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\t%s\n", e.Platform, e.SHA256, e.Size, dash(e.GoVersion), dash(shortRev(e.Revision)), yesNo(e.Dirty))
	}
	return tw.Flush()
}

func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

func nonNilBuilds(bs []client.Build) []client.Build {
	if bs == nil {
		return []client.Build{}
	}
	return bs
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}

// shortRev abbreviates a git revision to 12 characters for tables.
func shortRev(s string) string {
	if len(s) > 12 {
		return s[:12]
	}
	return s
}
