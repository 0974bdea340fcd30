package cli

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/lesfarm/lesfarm/coordinator/store"
	"github.com/lesfarm/lesfarm/internal/loadtest"
	"github.com/lesfarm/lesfarm/internal/pglocal"
	"github.com/lesfarm/lesfarm/migrations"
)

func init() { register("loadtest", newLoadtestCmd) }

func newLoadtestCmd(env *Env) *cobra.Command {
	var (
		cfg      loadtest.Config
		servers  []string
		natsURL  string
		dbURL    string
		dataDir  string
		format   string
		logLevel string
	)
	cmd := &cobra.Command{
		Use:   "loadtest --agents N --duration T [--server URL --nats-url URL --database-url URL | --data-dir D]",
		Short: "Drive a coordinator with N simulated agents and measure assignment latency, ingest and losses",
		Long: `loadtest runs N simulated agents for T against a coordinator. A simulated
agent runs no model: it speaks the real protocol (hello, heartbeats, signed
assignments, per-token telemetry batches and a result per run on JetStream)
with its own device credential, created for the test and revoked after it.

Every agent starts idle and one run per agent is triggered (trigger → assign
latency); then the queue is kept --surplus runs deep, so a finished agent
always finds work (result → next assign latency). After T the queue drains
and every run's stored samples are counted against what its agent sent.

Against a running farm: --server is the coordinator's HTTP base URL (repeat
it for several coordinators: their /metrics give RSS, CPU and committed
samples), --nats-url its NATS and --database-url its Postgres (where the
credentials and runs are created and the samples counted). Without
--server, a local PostgreSQL in DATA_DIR/pg and 'lesfarm serve' (embedded
NATS with per-device authentication) are started for the test, as a child
process, so the coordinator's RSS and CPU are its own.

Reported: assignments/s, trigger → assign and result → next assign p50/p99,
samples sent and ingested per second, ingest lag, drain time, coordinator
RSS and CPU, the load average, lost and duplicated samples. The exit status
is 1 unless nothing was lost or duplicated.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var level slog.Level
			if err := level.UnmarshalText([]byte(logLevel)); err != nil {
				return usagef("--log-level %q: want debug, info, warn or error", logLevel)
			}
			if format != "text" && format != "json" {
				return usagef("--format %q: want text or json", format)
			}
			if cfg.Agents < 1 || cfg.Agents > 20000 {
				return usagef("--agents %d: want 1..20000", cfg.Agents)
			}
			if cfg.Duration <= 0 {
				return usagef("--duration %s: want a positive duration", cfg.Duration)
			}
			log := slog.New(slog.NewTextHandler(env.Stderr, &slog.HandlerOptions{Level: level}))
			cfg.Logger = log
			ctx := env.Ctx
			if len(servers) > 0 {
				if natsURL == "" || dbURL == "" {
					return usagef("--server needs --nats-url and --database-url (the farm's NATS and Postgres)")
				}
				for _, s := range servers {
					cfg.MetricsURLs = append(cfg.MetricsURLs, strings.TrimRight(s, "/")+"/metrics")
				}
			} else {
				if natsURL != "" || dbURL != "" {
					return usagef("--nats-url and --database-url go with --server; without it the coordinator is started here")
				}
				exe, err := os.Executable()
				if err != nil {
					return fmt.Errorf("loadtest: %w", err)
				}
				e, err := startEmbeddedFarm(ctx, dataDir, exe, log)
				if err != nil {
					return err
				}
				defer func() {
					if err := e.stop(); err != nil {
						log.Warn("loadtest: coordinator stop", "err", err)
					}
				}()
				natsURL, dbURL = e.natsURL, e.dbURL
				cfg.MetricsURLs = []string{"http://" + e.httpAddr + "/metrics"}
				cfg.DatabaseCPU = treeCPU(filepath.Join(e.dir, "pg", "postmaster.pid"))
				fmt.Fprintf(env.Stderr, "loadtest: coordinator pid %d (http %s, nats %s), log %s\n", e.cmd.Process.Pid, e.httpAddr, e.natsURL, e.logPath)
			}
			st, err := store.Open(ctx, dbURL, store.Config{MaxConns: 8})
			if err != nil {
				return err
			}
			defer st.Close()
			cfg.Store, cfg.NATSURL = st, natsURL
			rep, err := loadtest.Run(ctx, cfg)
			if rep != nil {
				if format == "json" {
					_, _ = env.Stdout.Write(rep.JSON())
				} else {
					printLoadReport(env.Stdout, rep)
				}
			}
			if err != nil {
				return err
			}
			if !rep.OK() {
				return &ExitError{Code: 1, Msg: fmt.Sprintf("loadtest: %d samples lost, %d duplicated; %d runs assigned twice, %d not succeeded, %d unfinished",
					rep.LostSamples, rep.DuplicatedSamples, rep.DuplicatedAssignments, rep.FailedRuns, rep.UnfinishedRuns)}
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.IntVar(&cfg.Agents, "agents", 100, "simulated agents")
	f.DurationVar(&cfg.Duration, "duration", 30*time.Second, "how long runs are triggered (then the queue drains)")
	f.StringArrayVar(&servers, "server", nil, "coordinator HTTP base URL (repeatable); empty starts one here")
	f.StringVar(&natsURL, "nats-url", "", "the farm's NATS (with --server)")
	f.StringVar(&dbURL, "database-url", "", "the farm's PostgreSQL (with --server)")
	f.StringVar(&dataDir, "data-dir", "", "directory for the local PostgreSQL and coordinator (default: a temporary directory, removed after)")
	f.StringVar(&format, "format", "text", "report format: text or json")
	f.Float64Var(&cfg.SamplesPerSecond, "rate", 100, "telemetry samples per second per busy agent")
	f.IntVar(&cfg.Layers, "layers", 48, "per-layer expert counts in each sample")
	f.DurationVar(&cfg.BatchInterval, "batch-interval", 500*time.Millisecond, "telemetry batch interval (the agent's default)")
	f.DurationVar(&cfg.RunLength, "run-length", 5*time.Second, "how long one simulated run streams telemetry")
	f.IntVar(&cfg.Surplus, "surplus", 0, "runs kept queued beyond one per agent (default agents/10, at least 4)")
	f.DurationVar(&cfg.DrainTimeout, "drain-timeout", 2*time.Minute, "bound on the wait for the queue to drain and every sample to be stored")
	f.StringVar(&logLevel, "log-level", "warn", "log level: debug, info, warn or error")
	return cmd
}

func printLoadReport(w io.Writer, r *loadtest.Report) {
	fmt.Fprintf(w, "loadtest %s: %d agents for %.1fs (load average %.2f %.2f %.2f)\n", r.Session, r.Agents, r.DurationS, r.LoadAvg[0], r.LoadAvg[1], r.LoadAvg[2])
	fmt.Fprintf(w, "  assignments        %d in the window, %.1f/s (%d runs triggered)\n", r.Assignments, r.AssignmentsPerS, r.Runs)
	fmt.Fprintf(w, "  trigger → assign   p50 %.1f ms  p99 %.1f ms  max %.1f ms  (n=%d)\n", r.TriggerToAssign.P50MS, r.TriggerToAssign.P99MS, r.TriggerToAssign.MaxMS, r.TriggerToAssign.N)
	fmt.Fprintf(w, "  result → next      p50 %.1f ms  p99 %.1f ms  max %.1f ms  (n=%d)\n", r.ResultToNext.P50MS, r.ResultToNext.P99MS, r.ResultToNext.MaxMS, r.ResultToNext.N)
	fmt.Fprintf(w, "  telemetry          %d samples/batch × %d layers, %d bytes/batch\n", r.SamplesPerBatch, r.Layers, r.BatchBytes)
	fmt.Fprintf(w, "  samples            sent %.0f/s, ingested %.0f/s; lag p50 %.3fs max %.3fs; drained %.2fs after the last\n", r.SentPerS, r.IngestedPerS, r.IngestLagP50S, r.IngestLagMaxS, r.DrainS)
	fmt.Fprintf(w, "  steady (2nd half)  sent %.0f/s, ingested %.0f/s; with a backlog (%.1fs) ingested %.0f/s\n", r.SteadySentPerS, r.SteadyIngestedPerS, r.BacklogS, r.BacklogIngestedPerS)
	for _, c := range r.Coordinators {
		fmt.Fprintf(w, "  coordinator        %s: RSS max %.1f MiB, CPU %.2f cores, %d samples committed\n", c.MetricsURL, float64(c.RSSMaxBytes)/(1<<20), c.CPUCores, c.SamplesCommitted)
		if m := c.MemoryAtRSSMax; m != nil {
			mib := func(v int64) float64 { return float64(v) / (1 << 20) }
			fmt.Fprintf(w, "  memory at RSS max  heap live ~%.0f MiB, heap in use %.0f, idle kept %.0f, stacks %.0f, runtime %.0f MiB; %d goroutines\n",
				mib(m.HeapLive), mib(m.HeapInuse), mib(m.HeapIdle), mib(m.Stacks), mib(m.Runtime), m.Goroutines)
		}
	}
	fmt.Fprintf(w, "  load generator     CPU %.2f cores\n", r.LoadgenCPUCores)
	if r.DatabaseCPUCores > 0 {
		fmt.Fprintf(w, "  database           CPU %.2f cores (postgres and its backends)\n", r.DatabaseCPUCores)
	}
	for _, c := range r.Coordinators {
		if len(c.IngestWorkers) > 0 {
			fmt.Fprintf(w, "  ingest workers     fetch %.2f, decode %.2f, commit %.2f, ack %.2f (average workers in each phase)\n",
				c.IngestWorkers["fetch"], c.IngestWorkers["decode"], c.IngestWorkers["commit"], c.IngestWorkers["ack"])
		}
	}
	fmt.Fprintf(w, "  checked            %d samples sent, %d stored: %d lost, %d duplicated; %d runs assigned twice, %d not succeeded\n",
		r.SamplesSent, r.SamplesStored, r.LostSamples, r.DuplicatedSamples, r.DuplicatedAssignments, r.FailedRuns)
	fmt.Fprintf(w, "  superseded         %d attempts, %d samples fenced out (not lost)\n", r.SupersededAttempts, r.SupersededSamples)
	fmt.Fprintf(w, "  unfinished         %d runs at the drain bound, %d samples sent for them (throughput, not loss)\n", r.UnfinishedRuns, r.UnfinishedSamples)
}

// embeddedFarm is what loadtest starts without --server: a local
// PostgreSQL and 'lesfarm serve' as a child process.
type embeddedFarm struct {
	pg                       *pglocal.Server
	cmd                      *exec.Cmd
	exited                   chan error
	httpAddr, natsURL, dbURL string
	logPath, dir             string
	removeDir                bool
}

func startEmbeddedFarm(ctx context.Context, dir, exe string, log *slog.Logger) (_ *embeddedFarm, err error) {
	e := &embeddedFarm{dir: dir}
	if dir == "" {
		// Not under /root: the postgres user must reach the data dir.
		if e.dir, err = os.MkdirTemp("/tmp", "lesfarm-loadtest-"); err != nil {
			return nil, fmt.Errorf("loadtest: %w", err)
		}
		e.removeDir = true
		_ = os.Chmod(e.dir, 0o755)
	}
	defer func() {
		if err != nil {
			_ = e.stop()
		}
	}()
	if err := os.MkdirAll(e.dir, 0o755); err != nil {
		return nil, fmt.Errorf("loadtest: %w", err)
	}
	if e.pg, err = pglocal.Start(ctx, pglocal.Config{DataDir: filepath.Join(e.dir, "pg"), Logger: log}); err != nil {
		return nil, err
	}
	e.dbURL = e.pg.URL()
	if err := migrations.Up(ctx, e.dbURL); err != nil {
		return nil, fmt.Errorf("loadtest: migrate: %w", err)
	}
	e.logPath = filepath.Join(e.dir, "serve.log")
	logf, err := os.Create(e.logPath)
	if err != nil {
		return nil, fmt.Errorf("loadtest: %w", err)
	}
	defer logf.Close()
	e.cmd = exec.Command(exe, "serve", "--data-dir", e.dir, "--database-url", e.dbURL, "--http-addr", "127.0.0.1:0",
		"--nats-listen", "127.0.0.1:0", "--nats-auth", "strict", "--name", "loadtest-coordinator", "--log-level", "warn")
	e.cmd.Stderr = logf
	e.cmd.SysProcAttr = childAttr()
	out, err := e.cmd.StdoutPipe()
	if err != nil {
		return nil, fmt.Errorf("loadtest: %w", err)
	}
	if err := e.cmd.Start(); err != nil {
		return nil, fmt.Errorf("loadtest: start coordinator: %w", err)
	}
	e.exited = make(chan error, 1)
	lines := make(chan string, 8)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			select {
			case lines <- sc.Text():
			default:
			}
		}
		close(lines)
		e.exited <- e.cmd.Wait()
	}()
	deadline := time.After(2 * time.Minute)
	for e.httpAddr == "" || e.natsURL == "" {
		select {
		case l, ok := <-lines:
			if !ok {
				return nil, fmt.Errorf("loadtest: the coordinator exited before serving (see %s)", e.logPath)
			}
			if v, ok := strings.CutPrefix(strings.TrimSpace(l), "http: http://"); ok {
				e.httpAddr = v
			}
			if v, ok := strings.CutPrefix(strings.TrimSpace(l), "nats: "); ok {
				e.natsURL = v
			}
		case <-deadline:
			return nil, fmt.Errorf("loadtest: the coordinator did not start within 2m (see %s)", e.logPath)
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	return e, nil
}

func (e *embeddedFarm) stop() error {
	var errs []error
	if e.cmd != nil && e.cmd.Process != nil && e.exited != nil {
		_ = e.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case err := <-e.exited:
			var xe *exec.ExitError
			if err != nil && !errors.As(err, &xe) {
				errs = append(errs, err)
			}
		case <-time.After(30 * time.Second):
			_ = e.cmd.Process.Kill()
			errs = append(errs, errors.New("coordinator did not stop within 30s; killed"))
		}
	}
	if e.pg != nil {
		errs = append(errs, e.pg.Stop())
	}
	if e.removeDir {
		errs = append(errs, os.RemoveAll(e.dir))
	}
	return errors.Join(errs...)
}
