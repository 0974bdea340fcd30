package cli

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/lesfarm/lesfarm/coordinator"
	"github.com/lesfarm/lesfarm/coordinator/api/client"
	"github.com/lesfarm/lesfarm/coordinator/ingest"
	"github.com/lesfarm/lesfarm/coordinator/store"
	"github.com/lesfarm/lesfarm/dashboard"
	"github.com/lesfarm/lesfarm/jobs"
	"github.com/lesfarm/lesfarm/profile"
	"github.com/lesfarm/lesfarm/runtime/model"
)

func init() { register("demo", newDemoCmd) }

// demoSuite is the built-in suite the demo runs (jobs/suites/les-demo.yaml).
const demoSuite = "les-demo"

// demoOptions are the demo's flags.
type demoOptions struct {
	dataDir, httpAddr, modelArg string
	source                      string
	// routing is the synthetic model's routing preset (synth --routing).
	routing              string
	profiles             []string
	builds, regressBuild int
	exit                 bool
	// noGate skips the last act: the A/B gate of the planted build and
	// the bisection of its alert (demo_bisect.go).
	noGate  bool
	timeout time.Duration
	// ready, when set, is called with the API's base URL and the demo's
	// lineage once the results are printed, before serving (tests).
	ready func(base, lineage string)
}

func newDemoCmd(env *Env) *cobra.Command {
	var (
		o        demoOptions
		profiles string
	)
	cmd := &cobra.Command{
		Use:   "demo",
		Short: "Run the whole farm on embedded defaults and watch it catch a real LES regression",
		Long: `demo runs a complete farm in one process, the way a team would deploy it,
with nothing to configure and nothing fetched, and tells the LES story:

  1. a coordinator with an embedded NATS (JetStream) server and a local
     PostgreSQL started from the machine's binaries in --data-dir; NATS
     authenticates devices as 'lesfarm serve' does by default;
  2. one emulated phone per --profiles entry (built-in storage profiles:
     flash bandwidth, latency, queue depth and compute speed), each a host
     agent with its own device credential; they share this machine's CPUs,
     so they declare it (label lesfarm/host) and the coordinator runs them
     one at a time;
  3. a small synthetic MoE written locally by synth and packed, uploaded
     through the REST API, and the built-in 'les-demo' suite: the LES ladder
     (on-demand, on-demand-parallel, lookahead, scheduled) at a 25% expert
     budget, one warm-up and three repetitions, decode timed on each
     profile's device clock;
  4. two real builds compiled from the source tree (--source, default the
     checkout around the working directory) with the Go toolchain: the
     baseline, and one whose runtime is linked with lookahead turned off
     (-ldflags -X ...expert.lookaheadVariant=off: it predicts and
     prefetches nothing), pushed to the build registry with their sha256;
  5. --builds builds of the demo's lineage triggered in turn on every
     device: builds before --regress-build are the baseline executable,
     the later ones the lookahead-off one. Each phone downloads the build's
     executable and runs it as a child process (EXE runner); every result
     carries the sha256 of the executable that produced it. The regression
     is code, not a doctored number or an agent switch;
  6. the ladder per device and build, then the alerts the coordinator's
     detector raised (attributed to the LES metrics that moved, per device
     where they differ);
  7. (--gate, on by default) the planted build gated against the one
     before it with the A/B gate, as CI runs 'lesfarm run --baseline',
     which fails; then the alert bisected across all the builds, as
     'lesfarm bisect --wait' does, to its culprit; and the dashboard's
     address.

Each demo is its own build lineage (demo-<time>), so running it again in the
same --data-dir adds a new story beside the old ones. Afterwards it keeps
serving the dashboard and the API until Ctrl-C, unless --exit is given.`,
		Example: "  lesfarm demo\n  lesfarm demo --exit --http-addr 127.0.0.1:0\n  lesfarm demo --builds 8 --regress-build 6 --source ~/src/lesfarm",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			o.profiles = splitList(profiles)
			if err := o.validate(); err != nil {
				return err
			}
			return runDemo(env, &o)
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.dataDir, "data-dir", filepath.Join(defaultDataDir(), "demo"), "directory for the demo farm's state (PostgreSQL, NATS, artifacts, agent caches)")
	f.StringVar(&o.httpAddr, "http-addr", "127.0.0.1:8080", "address of the REST API and dashboard (port 0 picks a free one)")
	f.StringVar(&o.modelArg, "model", "", "GGUF MoE model to benchmark instead of the synthetic one (packed models stream with one read per expert)")
	f.StringVar(&o.routing, "routing", model.RoutingFineGrained, "routing preset of the synthetic model: fine-grained-moe (routes like a trained MoE; the suite's pinned model) or uniform (the worst case for caching and lookahead)")
	f.StringVar(&profiles, "profiles", "phone-flagship,phone-flagship-2025,phone-mid", "comma-separated storage profiles, one emulated phone each")
	f.IntVar(&o.builds, "builds", 8, "builds to run, one after the other, on every device")
	f.IntVar(&o.regressBuild, "regress-build", 5, "first build that is the executable compiled with lookahead turned off (0: none)")
	f.StringVar(&o.source, "source", "", "lesfarm source tree to compile the builds under test from (default: the checkout around the working directory)")
	f.BoolVar(&o.exit, "exit", false, "stop after printing the results instead of serving the dashboard")
	gate := f.Bool("gate", true, "after the alert, gate the planted build with --baseline and bisect the alert to its culprit")
	cmd.PreRun = func(*cobra.Command, []string) { o.noGate = !*gate }
	f.DurationVar(&o.timeout, "timeout", 10*time.Minute, "give up when the builds take longer than this")
	return cmd
}

func (o *demoOptions) validate() error {
	if len(o.profiles) == 0 {
		return usagef("demo: --profiles needs at least one storage profile")
	}
	for _, p := range o.profiles {
		if _, err := profile.Load(p); err != nil {
			return usagef("demo: --profiles: %v", err)
		}
	}
	if o.builds < 1 || o.builds > 100 {
		return usagef("demo: --builds %d must be between 1 and 100", o.builds)
	}
	if o.regressBuild < 0 || o.regressBuild > o.builds {
		return usagef("demo: --regress-build %d must be between 0 (none) and --builds %d", o.regressBuild, o.builds)
	}
	if o.routing == "" {
		o.routing = model.RoutingFineGrained
	}
	if !slices.Contains(model.RoutingPresets, o.routing) {
		return usagef("demo: --routing %q is unknown (have %s)", o.routing, strings.Join(model.RoutingPresets, ", "))
	}
	if o.modelArg != "" {
		if _, err := os.Stat(o.modelArg); err != nil {
			return usagef("demo: --model %s: %v", o.modelArg, errors.Unwrap(err))
		}
	}
	return nil
}

// demoFarm is a running demo: the coordinator, its API client and the
// emulated phones.
type demoFarm struct {
	env  *Env
	o    *demoOptions
	log  *slog.Logger
	c    *coordinator.Coordinator
	cl   *client.Client
	base string
	// secret is the API token the demo made for itself, printed for the
	// user at the end.
	secret string
	phones []*demoPhone
	// session names this demo's phones (label demoSessionLabel), so its
	// runs fan out to them only, never to phones an earlier demo left
	// registered in the same data dir.
	session string
	// observed receives the id of each run whose results the regression
	// detector has seen (the ingest hook runs after the monitor).
	observed chan int64
}

func (d *demoFarm) say(format string, args ...any) {
	fmt.Fprintf(d.env.Stdout, "==> "+format+"\n", args...)
}

func runDemo(env *Env, o *demoOptions) error {
	ctx := env.Ctx
	start := time.Now()
	d := &demoFarm{env: env, o: o, observed: make(chan int64, 1024),
		log: slog.New(slog.NewTextHandler(env.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))}
	d.say("starting the coordinator (embedded NATS + local PostgreSQL in %s)", o.dataDir)
	// The embedded NATS authenticates devices as 'lesfarm serve' does by
	// default: each emulated agent gets its own credential.
	deps, err := provision(ctx, provisionConfig{DataDir: o.dataDir, NATSListen: "127.0.0.1:0", NATSAuth: "devices", Log: d.log})
	if err != nil {
		return fmt.Errorf("demo: %w", err)
	}
	defer deps.Close()
	auth := deps.auth
	d.c, err = coordinator.New(coordinator.Config{
		Store: deps.store, NATS: deps.nc, DataDir: o.dataDir, HTTPAddr: o.httpAddr,
		Version: BuildVersion(), Logger: d.log, Mount: dashboard.Mount,
		Ingest: ingest.Config{Reporter: observedReporter{observed: d.observed}},
	})
	if err != nil {
		return err
	}
	if err := d.c.Start(ctx); err != nil {
		return err
	}
	defer func() { _ = d.c.Stop() }() // the demo is exiting; a failed shutdown leaves nothing to do
	auth.SetVerifier(d.c.Store())
	d.base = "http://" + d.c.HTTPAddr()
	d.say("coordinator up: API %s/v1, OpenAPI %s/openapi.json", d.base, d.base)

	secret, _, err := d.c.Store().CreateAPIToken(ctx, fmt.Sprintf("demo-%d", time.Now().UnixNano()))
	if err != nil {
		return fmt.Errorf("demo: create API token: %w", err)
	}
	d.secret = secret
	if d.cl, err = client.New(d.base, secret); err != nil {
		return err
	}
	src, err := demoSource(o.source)
	if err != nil {
		return err
	}
	code, err := d.compileDemoCode(ctx, src, filepath.Join(o.dataDir, "builds"))
	if err != nil {
		return err
	}
	spec, err := jobs.Builtin(demoSuite)
	if err != nil {
		return err
	}
	path := o.modelArg
	if path == "" {
		d.say("writing the synthetic MoE with synth and packing it (one read per expert)")
		if path, err = demoSynthModel(ctx, o.dataDir, o.routing, spec.Model.SHA256); err != nil {
			return err
		}
	}
	d.say("uploading model %s", path)
	sum, size, err := uploadModel(ctx, d.cl, path)
	if err != nil {
		return err
	}
	if spec.Model.SHA256 != sum {
		// Another model (--model): the built-in suite with it.
		spec.Model = jobs.Model{Name: filepath.Base(path), SHA256: sum, Size: jobs.ByteSize(size)}
		if err := putSuite(ctx, d.base, secret, demoSuite, spec); err != nil {
			return err
		}
	}

	defer d.stopPhones()
	d.say("starting %d emulated phone(s) on this host (label %s, one run at a time): %s",
		len(o.profiles), store.HostLabel, strings.Join(o.profiles, ", "))
	d.session = time.Now().UTC().Format("20060102T150405")
	for i, p := range o.profiles {
		if err := d.startPhone(ctx, fmt.Sprintf("emu-%s-%d", p, i+1), p); err != nil {
			return err
		}
	}

	lineage := "demo-" + d.session
	tctx, cancel := context.WithTimeout(ctx, o.timeout)
	defer cancel()
	var builds []demoBuild
	for b := 1; b <= o.builds; b++ {
		exe, what := code.base, "the baseline"
		if o.regressBuild > 0 && b >= o.regressBuild {
			exe, what = code.variant, "compiled with lookahead turned off"
		}
		if err := d.pushBuild(tctx, lineage, b, exe, what); err != nil {
			return err
		}
		bd, err := d.runBuild(tctx, lineage, b)
		if err != nil {
			return err
		}
		builds = append(builds, bd)
	}
	if err := d.printLadders(ctx, builds); err != nil {
		return err
	}
	groups, err := d.printAlerts(ctx, lineage)
	if err != nil {
		return err
	}
	if !o.noGate && groups > 0 {
		if err := d.gateAndBisect(tctx, lineage); err != nil {
			return err
		}
	}
	d.say("demo took %s", time.Since(start).Round(100*time.Millisecond))
	if o.ready != nil {
		o.ready(d.base, lineage)
	}
	if o.exit {
		d.say("%d alert group(s) on lineage %s; stopping the farm (--exit). Run it without --exit to browse the dashboard, or serve this data dir again:", groups, lineage)
		d.say("  lesfarm serve --data-dir %s   then open /?lineage=%s", o.dataDir, lineage)
		return nil
	}
	d.say("%d alert group(s) on lineage %s; dashboard: %s/?lineage=%s   API docs: %s/docs", groups, lineage, d.base, lineage, d.base)
	d.say("API token for this farm (paste it in the dashboard's token dialog, or --token for lesfarm run/build/artifact --server %s): %s", d.base, d.secret)
	d.say("serving until Ctrl-C")
	<-ctx.Done()
	return nil
}

// putSuite stores spec as suite name through the REST API.
func putSuite(ctx context.Context, base, token, name string, spec *jobs.Spec) error {
	spec.Name, spec.Suite = name, name
	return putJSON(ctx, base+"/v1/suites/"+name, token, map[string]any{"spec": spec})
}

func splitList(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

// demoProgressLine is one progress line of the demo: the run, the device
// it runs on (its name, the emulated agent's) or "waiting for a device"
// while it is queued, and the state.
func demoProgressLine(runID int64, device, msg string) string {
	if device == "" {
		return fmt.Sprintf("run %d (waiting for a device): %s", runID, msg)
	}
	return fmt.Sprintf("run %d on %s: %s", runID, device, msg)
}

// observedReporter sends the id of each run the coordinator's regression
// monitor has observed to observed (dropped when full).
type observedReporter struct {
	ingest.BaseReporter
	observed chan<- int64
}

func (r observedReporter) Finished(_ context.Context, run *store.Run) {
	select {
	case r.observed <- run.ID:
	default:
	}
}
