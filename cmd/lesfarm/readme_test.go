package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/lesfarm/lesfarm/internal/testenv"
)

func TestMain(m *testing.M) { os.Exit(testenv.Run(m)) }

// readmeSkips are the README blocks TestREADME does not run, by their
// first line, with the reason. Every other ```sh block runs.
var readmeSkips = map[string]string{
	"make setup demo": "the demo builds eight executables and serves until Ctrl-C; TestDemo* in internal/cli and docs/demo.md cover it",
	"make setup test": "it is the whole test suite, this test included",
	"# compile ./cmd/lesfarm from the checkout for each platform and push it": "it cross-compiles for android/arm64 (a minute on a cold cache) and runs the full les-ladder (minutes; it succeeds " +
		"on the Using it block's model, every rung valid, as measured with a one-budget override); the Using it block runs " +
		"the same commands (build push --from-source, run --model --wait) with linux/amd64 and smoke",
}

// readmeBlock is one fenced shell block of README.md.
type readmeBlock struct {
	line int // of its first command
	text string
}

// shellBlocks returns README's ```sh blocks in order.
func shellBlocks(t *testing.T, path string) []readmeBlock {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []readmeBlock
	var cur *readmeBlock
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		switch {
		case cur == nil && strings.TrimSpace(line) == "```sh":
			cur = &readmeBlock{line: n + 1}
		case cur != nil && strings.TrimSpace(line) == "```":
			out = append(out, *cur)
			cur = nil
		case cur != nil:
			cur.text += line + "\n"
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// freePort returns a TCP port nothing listens on now.
func freePort(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return fmt.Sprint(l.Addr().(*net.TCPAddr).Port)
}

// TestREADME runs README.md's shell blocks in order, as one bash script
// (set -euo pipefail), on a fresh data dir and database, with bin/lesfarm
// built once from this checkout first on PATH: the coordinator and agent
// in the background, the token commands, build push, run --wait on a model
// lesfarm makes, and the runtime tools. What differs from a newcomer's
// shell: the ports (free ones instead of 8080 and 4222, and LESFARM_SERVER
// pointing at that coordinator), a temporary directory instead of /tmp,
// and the database (a fresh one from the test harness instead of the data
// dir's own PostgreSQL; DATABASE_URL). The blocks in readmeSkips are not
// run, for the reasons given there.
func TestREADME(t *testing.T) {
	if _, err := exec.LookPath("curl"); err != nil {
		t.Skip("README's Using it block waits for the coordinator with curl, which is not installed")
	}
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	tmp := t.TempDir()
	bin := filepath.Join(tmp, "bin")
	// The same flags as build push --from-source, so its compile of the
	// checkout finds every package in the build cache.
	build := exec.Command("go", "build", "-trimpath", "-o", filepath.Join(bin, "lesfarm"), "./cmd/lesfarm")
	build.Dir, build.Env = root, append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	start := time.Now()
	httpPort, natsPort := freePort(t), freePort(t)
	work := filepath.Join(tmp, "work")
	if err := os.MkdirAll(work, 0o755); err != nil {
		t.Fatal(err)
	}
	script := "set -euo pipefail\n"
	if os.Getenv("README_LOG") != "" {
		script += "PS4='+ ${EPOCHREALTIME} '; set -x\n" // time each command
	}
	var ran []string
	for _, b := range shellBlocks(t, filepath.Join(root, "README.md")) {
		first, _, _ := strings.Cut(strings.TrimSpace(b.text), "\n")
		if why, ok := readmeSkips[first]; ok {
			t.Logf("README.md:%d skipped (%s): %s", b.line, first, why)
			continue
		}
		text := strings.NewReplacer("127.0.0.1:8080", "127.0.0.1:"+httpPort, "127.0.0.1:4222", "127.0.0.1:"+natsPort, "/tmp/", work+"/").Replace(b.text)
		script += fmt.Sprintf("echo \"=== README.md:%d $(date +%%T.%%N)\"\n%s", b.line, text)
		ran = append(ran, fmt.Sprintf("README.md:%d", b.line))
	}
	if len(ran) < 2 {
		t.Fatalf("ran %d README blocks; the Using it and runtime blocks are gone?", len(ran))
	}
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	logPath := filepath.Join(tmp, "readme.log")
	logf, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	defer logf.Close()
	cmd := exec.CommandContext(ctx, "bash", "-c", script)
	cmd.Dir = root // build push --from-source .
	// A file, not a pipe: the background coordinator and agent keep their
	// output open after the script ends, and Wait must not wait for them.
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	env := []string{"PATH=" + bin + string(os.PathListSeparator) + os.Getenv("PATH"), "HOME=" + tmp,
		"LESFARM_DATA_DIR=" + filepath.Join(tmp, "data"), "XDG_CACHE_HOME=" + filepath.Join(tmp, "cache"),
		"DATABASE_URL=" + testenv.PostgresURL(t), "LESFARM_SERVER=http://127.0.0.1:" + httpPort}
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		switch k {
		case "GOCACHE", "GOMODCACHE", "GOPATH", "PATH", "HOME", "DATABASE_URL", "LESFARM_SERVER", "LESFARM_TOKEN", "LESFARM_CA", "LESFARM_DATA_DIR", "LESFARM_DEVICE_TOKEN", "XDG_CACHE_HOME", "XDG_DATA_HOME":
		default:
			env = append(env, kv) // GOCACHE, GOPATH, GOFLAGS: build push runs go build
		}
	}
	// HOME and XDG_CACHE_HOME move, so name Go's caches as they are: build
	// push runs go build, which must find the modules and packages above.
	goenv, err := exec.Command("go", "env", "GOCACHE", "GOMODCACHE", "GOPATH").Output()
	if err != nil {
		t.Fatal(err)
	}
	for i, v := range strings.Fields(string(goenv)) {
		env = append(env, []string{"GOCACHE=", "GOMODCACHE=", "GOPATH="}[i]+v)
	}
	cmd.Env = env
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	// The background coordinator and agent end with the script's process
	// group: SIGTERM first (the agent reports, serve shuts down), then kill.
	defer stopGroup(t, cmd.Process.Pid)
	err = cmd.Wait()
	out, _ := os.ReadFile(logPath)
	took := time.Since(start).Round(time.Second)
	if err != nil {
		t.Fatalf("README blocks %v failed after %v: %v\n%s", ran, took, err, out)
	}
	t.Logf("README blocks %v ran in %v (bin/lesfarm built before)", ran, took)
	if os.Getenv("README_LOG") != "" {
		t.Logf("%s", out)
	}
	for _, want := range []string{
		"ok: all runs succeeded, no regression alert", // run --wait on the build pushed from this checkout
		"random weights (lesfarm synth): the text below is gibberish",
		"× oracle bytes: bytes read per token over the oracle's", // the ladder's legend
	} {
		if !strings.Contains(string(out), want) {
			t.Errorf("README's output lacks %q:\n%s", want, out)
		}
	}
}

// stopGroup sends SIGTERM to the process group pgid and waits until none
// of its processes is left, killing them after 20 s.
func stopGroup(t *testing.T, pgid int) {
	t.Helper()
	_ = syscall.Kill(-pgid, syscall.SIGTERM)
	err := testenv.Until(20*time.Second, 50*time.Millisecond, func() error {
		if syscall.Kill(-pgid, 0) == nil {
			return errors.New("README's background processes ignored SIGTERM for 20 s: killed")
		}
		return nil
	})
	if err != nil {
		t.Log(err)
		_ = syscall.Kill(-pgid, syscall.SIGKILL)
	}
}
