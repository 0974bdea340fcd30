//go:build unix

package agent

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"reflect"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/lesfarm/lesfarm/jobs"
	"github.com/lesfarm/lesfarm/profile"
	"github.com/lesfarm/lesfarm/protocol"
)

// fakeJobFor is a two-config job for the fake runners (which run nothing).
func fakeJobFor(t *testing.T) *Job {
	t.Helper()
	spec, err := jobs.Builtin("smoke")
	if err != nil {
		t.Fatal(err)
	}
	return &Job{Spec: spec, Configs: spec.Expand(), ModelPath: "/nonexistent/model.gguf"}
}

// TestRunChildBuildFailures: every way a build's runner can fail is a
// *BuildError that says what happened, with the end of its stderr, and
// the child is gone when RunChild returns.
func TestRunChildBuildFailures(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		mode   string
		lim    ChildLimits
		reason string
		stderr string
		linux  bool // needs /proc
	}{
		{mode: "garbage", reason: `runner broke the protocol: first line is not a hello`},
		{mode: "garbage-later", reason: "runner broke the protocol: protocol: runner message rejected (malformed)"},
		{mode: "bigline", reason: "a line longer than 1048576 bytes"},
		{mode: "nohello", lim: ChildLimits{HelloTimeout: 300 * time.Millisecond}, reason: "runner said no hello within 300ms"},
		{mode: "hang", lim: ChildLimits{Timeout: time.Second}, reason: "runner timed out after 1s"},
		{mode: "version", reason: "the build speaks runner protocol 99; this agent speaks runner protocol 1 to 1"},
		{mode: "exit3", reason: "runner exited with status 3; stderr ends: panic: the build is broken", stderr: "loading model...\npanic: the build is broken\n"},
		{mode: "errorline", reason: "runner exited with status 1: model file is not a GGUF"},
		{mode: "signal", reason: "runner was killed (signal: killed)"},
		{mode: "noresults", reason: "runner reported 0 results for 2 configs"},
		{mode: "wrongresult", reason: `result 0 is for config 0 "someone-else", want 0 "resident"`},
		{mode: "nodone", reason: "runner exited without its done line"},
		{mode: "alloc", lim: ChildLimits{RAMBudget: 128 << 20}, reason: "runner exceeded the RAM budget: its process group held", linux: true},
	} {
		t.Run(tc.mode, func(t *testing.T) {
			t.Parallel()
			if tc.linux && runtime.GOOS != "linux" {
				t.Skip("the RAM budget is enforced from /proc (Linux)")
			}
			r := &Runner{}
			t0 := time.Now()
			_, info, err := r.RunChild(context.Background(), fakeRunnerExe(t, tc.mode), fakeJobFor(t), tc.lim)
			var be *BuildError
			if !errors.As(err, &be) {
				t.Fatalf("err = %v (%T), want a *BuildError", err, err)
			}
			if !strings.Contains(be.Reason, tc.reason) {
				t.Fatalf("reason %q, want it to contain %q", be.Reason, tc.reason)
			}
			if info == nil || be.StderrTail != info.StderrTail || !strings.Contains(info.StderrTail, tc.stderr) {
				t.Fatalf("info %+v, error's stderr %q, want stderr containing %q", info, be.StderrTail, tc.stderr)
			}
			if tc.mode == "alloc" && info.PeakRSSBytes <= tc.lim.RAMBudget {
				t.Errorf("peak RSS %d not above the budget %d it overran", info.PeakRSSBytes, tc.lim.RAMBudget)
			}
			t.Logf("%s: %v after %v (peak RSS %d MiB)", tc.mode, err, time.Since(t0).Round(time.Millisecond), info.PeakRSSBytes>>20)
		})
	}
}

// TestRunChildSucceeds: a runner that follows the protocol gives its
// results, through OnResult as they come and as RunChild's return, and
// its hello.
func TestRunChildSucceeds(t *testing.T) {
	t.Parallel()
	job := fakeJobFor(t)
	var seen []string
	job.OnResult = func(c protocol.ConfigResult) { seen = append(seen, c.ConfigKey) }
	res, info, err := (&Runner{}).RunChild(context.Background(), fakeRunnerExe(t, "ok"), job, ChildLimits{Timeout: time.Minute, RAMBudget: 8 << 30})
	if err != nil {
		t.Fatal(err)
	}
	if len(res) != 2 || res[0].ConfigKey != job.Configs[0].Key || res[1].ConfigKey != job.Configs[1].Key || strings.Join(seen, ",") != res[0].ConfigKey+","+res[1].ConfigKey {
		t.Fatalf("results %+v, OnResult saw %v", res, seen)
	}
	if info.Protocol != 1 || info.Revision != "fake-revision" || info.GoVersion != "go-fake" || info.PeakRSSBytes <= 0 {
		t.Fatalf("info %+v", info)
	}
}

// TestRunChildCancel: a cancelled run kills the child and returns the
// context's cause, not a build failure.
func TestRunChildCancel(t *testing.T) {
	t.Parallel()
	cause := errors.New("lease lost")
	ctx, cancel := context.WithCancelCause(context.Background())
	job := fakeJobFor(t)
	// The hang runner says it is running the job (a progress line) once
	// it read it: cancel then.
	job.OnProgress = func(protocol.Progress) { cancel(cause) }
	_, _, err := (&Runner{}).RunChild(ctx, fakeRunnerExe(t, "hang"), job, ChildLimits{})
	var be *BuildError
	if !errors.Is(err, cause) || errors.As(err, &be) {
		t.Fatalf("err = %v, want the cancel cause", err)
	}
}

// TestRunChildKillsLeftovers: a runner that forks a grandchild holding its
// stdout and exits succeeds, and the grandchild is dead when RunChild
// returns.
func TestRunChildKillsLeftovers(t *testing.T) {
	t.Parallel()
	if runtime.GOOS != "linux" {
		t.Skip("reads the grandchild's state from /proc")
	}
	res, info, err := (&Runner{}).RunChild(context.Background(), fakeRunnerExe(t, "fork"), fakeJobFor(t), ChildLimits{Timeout: time.Minute})
	if err != nil || len(res) != 2 {
		t.Fatalf("results %v, err %v", res, err)
	}
	_, after, ok := strings.Cut(info.StderrTail, "grandchild ")
	pid, perr := strconv.Atoi(strings.TrimSpace(after))
	if !ok || perr != nil {
		t.Fatalf("no grandchild pid in stderr %q", info.StderrTail)
	}
	// It closed its files (stdout's EOF) on its way out; it is gone, or a
	// zombie (reparented to an init that may not reap), a moment later.
	waitFor(t, 10*time.Second, "the grandchild's death", func() bool {
		st, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
		i := strings.LastIndexByte(string(st), ')')
		return err != nil || (i >= 0 && strings.HasPrefix(string(st[i:]), ") Z"))
	})
}

// TestRunChildStderrTail keeps the last MaxStderrTail bytes of stderr, as
// valid UTF-8.
func TestRunChildStderrTail(t *testing.T) {
	t.Parallel()
	_, info, err := (&Runner{}).RunChild(context.Background(), fakeRunnerExe(t, "stderrflood"), fakeJobFor(t), ChildLimits{})
	var be *BuildError
	if !errors.As(err, &be) || info == nil {
		t.Fatalf("err %v", err)
	}
	tail := info.StderrTail
	if len(tail) > protocol.MaxStderrTail || len(tail) < protocol.MaxStderrTail-4 || !utf8.ValidString(tail) || !strings.HasSuffix(tail, "line 19999 ü\n") {
		t.Fatalf("tail of %d bytes (valid UTF-8 %v): ...%q", len(tail), utf8.ValidString(tail), tail[max(0, len(tail)-40):])
	}
	if !strings.Contains(be.Reason, "stderr ends: line 19999 ü") {
		t.Errorf("reason %q", be.Reason)
	}
}

// TestRunChildStartFails: an executable that cannot start is the agent's
// problem, not the build's.
func TestRunChildStartFails(t *testing.T) {
	t.Parallel()
	_, info, err := (&Runner{}).RunChild(context.Background(), "/nonexistent/lesfarm", fakeJobFor(t), ChildLimits{})
	var be *BuildError
	if err == nil || errors.As(err, &be) || info != nil {
		t.Fatalf("err %v, info %v", err, info)
	}
}

// TestRunnerJobCarriesSettings: the runner settings survive the trip to
// the child (RunnerJob as JSON) unchanged, the storage profile with its
// compute and service times included.
func TestRunnerJobCarriesSettings(t *testing.T) {
	t.Parallel()
	prof, err := profile.Parse([]byte(`name: measured
bandwidth: 2GB/s
latency: 90us
max_in_flight: 8
ram_budget: 6GiB
page_size: 16KiB
read_ahead: 128KiB
compute:
  weight_bandwidth: 40GB/s
  throughput: 1.5TFLOP/s
  page_cost: 150ns
service_times:
  queue_depths: [1, 4]
  reads:
    - {size: 4KiB, times: [80us, 100us]}
    - {size: 864KiB, pattern: layer, times: [1ms, 2ms]}
`))
	if err != nil {
		t.Fatal(err)
	}
	r := &Runner{Threads: 3, Profile: prof, Direct: true, WorkDir: "/cache", Pin: true, DiscardOutliers: true,
		Gate: ThermalGate{MaxTempC: 41, Timeout: time.Minute, Poll: time.Second}}
	job := fakeJobFor(t)
	rj := r.runnerJob(job, protocol.RunnerProtocolVersion)
	data, err := json.Marshal(rj)
	if err != nil {
		t.Fatal(err)
	}
	back, err := protocol.DecodeRunnerJob(data)
	if err != nil {
		t.Fatal(err)
	}
	r2, job2, err := RunnerFromJob(back, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(r2, r) {
		t.Fatalf("runner changed on the way:\n%+v\n%+v", r2, r)
	}
	if !reflect.DeepEqual(job2.Spec, job.Spec) || !reflect.DeepEqual(job2.Configs, job.Configs) || job2.ModelPath != job.ModelPath {
		t.Fatalf("job changed on the way: %+v", job2)
	}
}
