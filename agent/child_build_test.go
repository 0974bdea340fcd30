//go:build unix

package agent

import (
	"context"
	"log/slog"
	"os/exec"
	"path/filepath"
	"slices"
	"syscall"
	"testing"
	"time"

	"github.com/lesfarm/lesfarm/agent/telemetry"
	"github.com/lesfarm/lesfarm/internal/fixture"
	"github.com/lesfarm/lesfarm/jobs"
	"github.com/lesfarm/lesfarm/protocol"
)

// TestRunChildRealBuild builds ./cmd/lesfarm and runs a job through its
// `lesfarm runner` and through the embedded runtime on the same model:
// the same configs and the same tokens.
func TestRunChildRealBuild(t *testing.T) {
	if testing.Short() {
		t.Skip("builds ./cmd/lesfarm (seconds with a warm Go cache); run without -short")
	}
	t.Parallel()
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go toolchain on PATH to build ./cmd/lesfarm")
	}
	bin := buildLesfarm(t, goBin)
	path, sha, _ := writeKillModel(t)
	spec := childSpec(t, sha)
	if err := bin.wait(); err != nil {
		t.Fatal(err)
	}
	compareChildAndEmbedded(t, bin.path, path, spec)
}

// BenchmarkRunnerChildOverhead measures what running a build as a child
// costs over the embedded runtime on les-ladder configs (the trained
// fixture model, the ladder's prompts and token counts, the emulated
// flagship's flash at half the expert bytes, no cool-down). configs=1 is
// one config a job (lookahead), the worst case: the child's start is paid
// by one config; configs=4 is a job of on-demand, on-demand-parallel,
// lookahead and scheduled, as a ladder's job runs all its configs in one
// child. Each iteration runs the job embedded and through a freshly built
// `lesfarm runner`, alternating which goes first, both streaming into a
// telemetry aggregator that encodes its batches as the agent does. It
// reports the median wall time of each, the median of the pairs'
// child/embedded ratios as overhead-%, and the same for the CPU time both
// processes spent as cpu-overhead-%.
//
//	go test -run '^$' -bench RunnerChildOverhead -benchtime 10x ./agent/
func BenchmarkRunnerChildOverhead(b *testing.B) {
	path := trainedModel(b)
	spec, err := jobs.Builtin("les-ladder")
	if err != nil {
		b.Fatal(err)
	}
	spec.Cooldown = 0
	pick := func(modes ...string) []jobs.Config {
		var out []jobs.Config
		for _, m := range modes {
			i := slices.IndexFunc(spec.Expand(), func(c jobs.Config) bool { return c.Key == m+"/budget=50%/profile=phone-flagship" })
			if i < 0 {
				b.Fatalf("les-ladder has no %s/budget=50%%/profile=phone-flagship config", m)
			}
			out = append(out, spec.Expand()[i])
		}
		return out
	}
	exe := filepath.Join(b.TempDir(), "lesfarm")
	build := exec.Command("go", "build", "-o", exe, "./cmd/lesfarm")
	build.Dir = fixture.RepoRoot()
	if out, err := build.CombinedOutput(); err != nil {
		b.Fatalf("go build ./cmd/lesfarm: %v\n%s", err, out)
	}
	b.Run("configs=1", func(b *testing.B) { benchChildOverhead(b, exe, path, spec, pick("lookahead")) })
	b.Run("configs=4", func(b *testing.B) {
		benchChildOverhead(b, exe, path, spec, pick("on-demand", "on-demand-parallel", "lookahead", "scheduled"))
	})
}

// benchChildOverhead is BenchmarkRunnerChildOverhead on one job.
func benchChildOverhead(b *testing.B, exe, path string, spec *jobs.Spec, configs []jobs.Config) {
	r := &Runner{Threads: 1, Gate: ThermalGate{Disabled: true}, WorkDir: b.TempDir(), Logger: slog.New(slog.DiscardHandler)}
	run := func(child bool) (wall, cpu time.Duration) {
		agg := telemetryEncoder(b)
		job := &Job{Spec: spec, Configs: configs, ModelPath: path, Sink: agg, Position: agg.SetPosition}
		c0, t0 := cpuTime(), time.Now()
		var res []protocol.ConfigResult
		var err error
		if child {
			res, _, err = r.RunChild(context.Background(), exe, job, ChildLimits{})
		} else {
			res, err = r.Run(context.Background(), job)
		}
		wall = time.Since(t0)
		agg.Close()
		cpu = cpuTime() - c0
		if err != nil || len(res) != len(configs) || slices.ContainsFunc(res, func(c protocol.ConfigResult) bool { return c.Error != "" }) {
			b.Fatalf("child %v: %v %+v", child, err, res)
		}
		return wall, cpu
	}
	var emb, chi, embCPU, chiCPU []float64
	add := func(child bool) {
		w, c := run(child)
		if child {
			chi, chiCPU = append(chi, w.Seconds()), append(chiCPU, c.Seconds())
		} else {
			emb, embCPU = append(emb, w.Seconds()), append(embCPU, c.Seconds())
		}
	}
	b.ReportAllocs()
	for n := 0; b.Loop(); n++ {
		add(n%2 == 1)
		add(n%2 == 0)
	}
	// Each pair ran back to back, under the same load: the median of the
	// pairs' ratios is the figure least moved by what else the machine
	// does.
	ratios := make([]float64, len(emb))
	for i := range emb {
		ratios[i] = chi[i] / emb[i]
	}
	me, mc, mr := median(emb), median(chi), median(ratios)
	b.ReportMetric(me*1e3, "embedded-ms")
	b.ReportMetric(mc*1e3, "child-ms")
	b.ReportMetric(100*(mr-1), "overhead-%")
	// CPU time (the agent's and the child's, user and system) is the
	// work each path does, whatever else runs on the machine.
	cpuRatios := make([]float64, len(embCPU))
	for i := range embCPU {
		cpuRatios[i] = chiCPU[i] / embCPU[i]
	}
	b.ReportMetric(100*(median(cpuRatios)-1), "cpu-overhead-%")
	slices.Sort(ratios)
	b.Logf("%d pairs: embedded median %.1f ms, child median %.1f ms; child/embedded per pair: median %.3f, range %.3f-%.3f; CPU %.1f ms vs %.1f ms, ratio %.3f",
		len(emb), me*1e3, mc*1e3, mr, ratios[0], ratios[len(ratios)-1], median(embCPU)*1e3, median(chiCPU)*1e3, median(cpuRatios))
}

// cpuTime is the user and system time of this process and of its
// children that were waited for.
func cpuTime() time.Duration {
	var total time.Duration
	for _, who := range []int{syscall.RUSAGE_SELF, syscall.RUSAGE_CHILDREN} {
		var ru syscall.Rusage
		if err := syscall.Getrusage(who, &ru); err == nil {
			total += time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
		}
	}
	return total
}

// telemetryEncoder is an aggregator whose batches are encoded as the
// agent encodes them before it sends them.
func telemetryEncoder(b *testing.B) *telemetry.Aggregator {
	return telemetry.NewAggregator(telemetry.AggregatorConfig{RunID: 1, Token: 1, DeviceID: "bench", Emit: func(tb *protocol.TelemetryBatch) {
		if _, err := protocol.Encode(tb); err != nil {
			b.Error("telemetry batch not encodable: ", err)
		}
	}})
}
