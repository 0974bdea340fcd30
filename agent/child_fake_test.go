//go:build unix

// The fake runner children of child_test.go: this test binary, started
// again through a script that sets fakeRunnerEnv, plays a runner child
// that misbehaves in one way (or, in mode "serve", the real one).

package agent

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/lesfarm/lesfarm/protocol"
)

// fakeRunnerEnv names the fake runner's mode in the environment.
const fakeRunnerEnv = "LESFARM_FAKE_RUNNER"

// init turns the test binary into a fake runner when fakeRunnerEnv is set,
// before any test (or TestMain) runs.
func init() {
	if mode := os.Getenv(fakeRunnerEnv); mode != "" {
		os.Exit(fakeRunner(mode))
	}
}

// fakeRunnerExe returns an executable that runs this test binary as the
// fake runner in mode (a script that execs it, so the runner is the
// process the agent started).
func fakeRunnerExe(t testing.TB, mode string) string {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(t.TempDir(), "runner-"+mode)
	script := fmt.Sprintf("#!/bin/sh\n%s=%s exec '%s' \"$@\"\n", fakeRunnerEnv, mode, self)
	if err := os.WriteFile(p, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	return p
}

func fakeLine(l *protocol.RunnerLine) {
	b, _ := json.Marshal(l)
	os.Stdout.Write(append(b, '\n'))
}

func fakeHello(v int) {
	fakeLine(&protocol.RunnerLine{T: protocol.RunnerHello, Protocol: v, GoVersion: "go-fake", Revision: "fake-revision"})
}

func fakeJob() *protocol.RunnerJob {
	data, _ := io.ReadAll(os.Stdin)
	j, err := protocol.DecodeRunnerJob(data)
	if err != nil {
		fmt.Fprintln(os.Stderr, "fake runner:", err)
		os.Exit(1)
	}
	return j
}

// fakeResults writes a result for each of j's configs, and done.
func fakeResults(j *protocol.RunnerJob) {
	for _, c := range j.Configs {
		fakeLine(&protocol.RunnerLine{T: protocol.RunnerResult, Result: &protocol.ConfigResult{ConfigIndex: c.Index, ConfigKey: c.Key, Valid: true, Repetitions: 1}})
	}
	fakeLine(&protocol.RunnerLine{T: protocol.RunnerDone})
}

func block() { select {} }

// fakeRunner plays mode and returns the exit code.
func fakeRunner(mode string) int {
	switch mode {
	case "serve": // the real child side
		ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
		defer stop()
		if err := ServeRunner(ctx, os.Stdin, os.Stdout, slog.New(slog.NewTextHandler(os.Stderr, nil))); err != nil {
			fmt.Fprintln(os.Stderr, "runner:", err)
			return protocol.RunnerExitFailed
		}
		return protocol.RunnerExitOK
	case "ok":
		fakeHello(1)
		fakeResults(fakeJob())
	case "garbage":
		fmt.Println("Hello, world! (not a runner)")
		block()
	case "garbage-later":
		fakeHello(1)
		fakeJob()
		fmt.Println(`{"t":"step","step":{"ph":"decode"`)
		block()
	case "bigline":
		fakeHello(1)
		fmt.Println(`{"t":"error","error":"` + strings.Repeat("x", protocol.MaxRunnerLineBytes) + `"}`)
		block()
	case "nohello":
		block()
	case "hang":
		fakeHello(1)
		fakeJob()
		fakeLine(&protocol.RunnerLine{T: protocol.RunnerProgress, Progress: &protocol.Progress{Phase: "hang"}})
		block()
	case "version":
		fakeHello(protocol.RunnerProtocolVersion + 98)
		block()
	case "exit3":
		fakeHello(1)
		fakeJob()
		fmt.Fprintln(os.Stderr, "loading model...\npanic: the build is broken")
		return 3
	case "errorline":
		fakeHello(1)
		fakeJob()
		fakeLine(&protocol.RunnerLine{T: protocol.RunnerError, Error: "model file is not a GGUF"})
		return protocol.RunnerExitFailed
	case "stderrflood":
		fakeHello(1)
		for i := range 20000 {
			fmt.Fprintf(os.Stderr, "line %05d ü\n", i)
		}
		return 1
	case "signal":
		fakeHello(1)
		fakeJob()
		syscall.Kill(os.Getpid(), syscall.SIGKILL)
		block()
	case "noresults":
		fakeHello(1)
		fakeJob()
		fakeLine(&protocol.RunnerLine{T: protocol.RunnerDone})
	case "wrongresult":
		fakeHello(1)
		j := fakeJob()
		fakeLine(&protocol.RunnerLine{T: protocol.RunnerResult, Result: &protocol.ConfigResult{ConfigIndex: j.Configs[0].Index, ConfigKey: "someone-else"}})
		block()
	case "nodone":
		fakeHello(1)
		fakeJob()
	case "alloc":
		fakeHello(1)
		fakeJob()
		mem := make([]byte, 512<<20)
		for i := 0; i < len(mem); i += 4096 {
			mem[i] = 1
		}
		block()
	case "fork": // a grandchild that outlives its parent, holding stdout
		fakeHello(1)
		j := fakeJob()
		self, _ := os.Executable()
		gc := exec.Command(self)
		gc.Env = append(os.Environ(), fakeRunnerEnv+"=sleeper")
		gc.Stdout = os.Stdout
		if err := gc.Start(); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		fmt.Fprintf(os.Stderr, "grandchild %d\n", gc.Process.Pid)
		fakeResults(j)
	case "sleeper":
		block()
	default:
		fmt.Fprintln(os.Stderr, "unknown fake runner mode", mode)
		return 2
	}
	return 0
}
