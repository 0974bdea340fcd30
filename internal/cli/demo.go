package cli

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/lesfarm/lesfarm/agent"
	"github.com/lesfarm/lesfarm/coordinator"
	"github.com/lesfarm/lesfarm/coordinator/api"
	"github.com/lesfarm/lesfarm/coordinator/api/client"
	"github.com/lesfarm/lesfarm/dashboard"
	"github.com/lesfarm/lesfarm/jobs"
	"github.com/lesfarm/lesfarm/runtime/model"
	"github.com/lesfarm/lesfarm/runtime/tensor"
)

func init() { register("demo", newDemoCmd) }

// trainedFixture is the trained MoE the built-in smoke suite names.
const trainedFixture = "testdata/trained/tiny-moe-kjv-f16.gguf"

func newDemoCmd(env *Env) *cobra.Command {
	var (
		dataDir  string
		httpAddr string
		modelArg string
		profiles string
		exit     bool
		timeout  time.Duration
	)
	cmd := &cobra.Command{
		Use:   "demo",
		Short: "Run the whole farm on embedded defaults: coordinator, emulated phones, a smoke suite",
		Long: `demo runs a complete farm in one process, the way a team would deploy it,
with nothing to configure:

  1. a coordinator with an embedded NATS (JetStream) server and a local
     PostgreSQL started from the machine's binaries in --data-dir; NATS
     authenticates devices as 'lesfarm serve' does by default;
  2. one host agent per --profiles entry, each emulating a phone's flash
     (bandwidth, latency, queue depth) with the LES expert store, and each
     connecting with its own device credential (revoked when the demo ends);
  3. the model artifact uploaded through the REST API: the trained MoE
     fixture when ../shared/testdata is present (the built-in 'smoke'
     suite names it), otherwise a synthetic MoE written by 'synth' with the
     same geometry, in a 'demo' suite;
  4. a run triggered through the REST API on every device, with progress
     streamed, then the results table (decode tok/s, hit rate, ...).

Afterwards it keeps serving the dashboard and the API until Ctrl-C, unless
--exit is given. Everything stays in --data-dir; run it again to add points
to the same series.`,
		Example: "  lesfarm demo\n  lesfarm demo --exit --profiles phone-flagship\n  lesfarm demo --model /models/qwen3moe-q4_k.gguf --http-addr 127.0.0.1:9090",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			profs := splitList(profiles)
			if len(profs) == 0 {
				return usagef("demo: --profiles needs at least one storage profile")
			}
			if modelArg != "" {
				if _, err := os.Stat(modelArg); err != nil {
					return usagef("demo: --model %s: %v", modelArg, errors.Unwrap(err))
				}
			}
			ctx := env.Ctx
			log := slog.New(slog.NewTextHandler(env.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
			say := func(format string, args ...any) { fmt.Fprintf(env.Stdout, "==> "+format+"\n", args...) }

			say("starting the coordinator (embedded NATS + local PostgreSQL in %s)", dataDir)
			if err := os.MkdirAll(dataDir, 0o755); err != nil {
				return fmt.Errorf("demo: data dir: %w", err)
			}
			// The embedded NATS authenticates devices as 'lesfarm serve'
			// does by default: each emulated agent gets its own credential.
			ns, auth, err := startEmbeddedNATS("127.0.0.1:0", dataDir, "devices", nil, log)
			if err != nil {
				return err
			}
			defer func() { ns.Shutdown(); ns.WaitForShutdown() }()
			c, err := coordinator.New(coordinator.Config{
				DataDir: dataDir, HTTPAddr: httpAddr, NATSURL: ns.ClientURL(), NATSOptions: auth.CoordinatorOptions(),
				Version: BuildVersion(), Logger: log, Mount: dashboard.Mount,
			})
			if err != nil {
				return err
			}
			if err := c.Start(ctx); err != nil {
				return err
			}
			defer c.Stop()
			auth.SetVerifier(c.Store())
			base := "http://" + c.HTTPAddr()
			say("coordinator up: API %s/v1, OpenAPI %s/openapi.json", base, base)

			secret, _, err := c.Store().CreateAPIToken(ctx, fmt.Sprintf("demo-%d", time.Now().Unix()))
			if err != nil {
				return fmt.Errorf("demo: create API token: %w", err)
			}
			cl, err := client.New(base, secret)
			if err != nil {
				return err
			}

			path, synthetic, err := demoModel(ctx, env, modelArg, dataDir)
			if err != nil {
				return err
			}
			say("uploading model %s", path)
			sum, size, err := uploadModel(ctx, cl, path)
			if err != nil {
				return err
			}
			suite := "smoke"
			if spec, _ := jobs.Builtin("smoke"); spec == nil || spec.Model.SHA256 != sum {
				suite = "demo"
				if err := putDemoSuite(ctx, base, secret, filepath.Base(path), sum, size); err != nil {
					return err
				}
			}
			if synthetic {
				say("the trained fixture is not here, so the suite runs on a synthetic MoE of the same shape")
			}

			say("starting %d emulated phone agent(s): %s", len(profs), strings.Join(profs, ", "))
			actx, stopAgents := context.WithCancel(context.Background())
			var wg sync.WaitGroup
			defer func() { stopAgents(); wg.Wait() }()
			for i, p := range profs {
				name := fmt.Sprintf("emu-%s-%d", p, i+1)
				devSecret, cred, err := c.Store().CreateDeviceCredential(ctx, name)
				if err != nil {
					return fmt.Errorf("demo: device credential for %s: %w", name, err)
				}
				defer func() { _, _ = c.Store().RevokeDeviceCredential(context.WithoutCancel(ctx), cred.ID) }()
				a, err := agent.New(agent.Config{
					NATSURL: c.NATSURL(), Name: name, User: name, Password: devSecret, Profile: p,
					CacheDir: filepath.Join(dataDir, "agents", fmt.Sprintf("%s-%d", p, i+1)),
					Labels:   map[string]string{"pool": "demo"}, Logger: log,
				})
				if err != nil {
					return err
				}
				wg.Add(1)
				go func() { defer wg.Done(); _ = a.Run(actx) }()
			}
			if err := waitDevices(ctx, base, len(profs)); err != nil {
				return err
			}

			build := "demo-" + time.Now().UTC().Format("20060102T150405")
			say("triggering suite %q for build %s on every device", suite, build)
			tctx, cancel := context.WithTimeout(ctx, timeout)
			defer cancel()
			set, err := cl.TriggerRuns(tctx, &client.TriggerRequest{Suite: suite, Build: build,
				Devices: &jobs.Selector{Labels: map[string]string{"pool": "demo"}}, Fanout: true})
			if err != nil {
				return fmt.Errorf("demo: trigger: %w", err)
			}
			last := map[int64]string{}
			done, err := cl.FollowTrigger(tctx, set.Trigger.ID, func(ev client.RunEvent) {
				msg := fmt.Sprintf("%s %3.0f%% %s", ev.State, 100*ev.Progress, ev.ProgressMessage)
				if ev.Error != "" {
					msg += " (" + ev.Error + ")"
				}
				if last[ev.RunID] != msg {
					last[ev.RunID] = msg
					fmt.Fprintf(env.Stdout, "    %s\n", demoProgressLine(ev.RunID, ev.DeviceID, msg))
				}
			})
			if err != nil {
				return fmt.Errorf("demo: waiting for runs: %w", err)
			}
			if err := printDemoResults(ctx, env.Stdout, base, set.Trigger.RunIDs); err != nil {
				return err
			}
			say("dashboard: %s/   API docs: %s/docs", base, base)
			if !done.Succeeded {
				return fmt.Errorf("demo: not every run succeeded: %v", done.States)
			}
			if exit {
				return nil
			}
			say("serving until Ctrl-C")
			<-ctx.Done()
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&dataDir, "data-dir", filepath.Join(defaultDataDir(), "demo"), "directory for the demo farm's state (PostgreSQL, NATS, artifacts, agent caches)")
	f.StringVar(&httpAddr, "http-addr", "127.0.0.1:8080", "address of the REST API and dashboard (port 0 picks a free one)")
	f.StringVar(&modelArg, "model", "", "GGUF MoE model to benchmark (default: the trained fixture, else a synthetic model)")
	f.StringVar(&profiles, "profiles", "phone-flagship,phone-mid", "comma-separated storage profiles, one emulated agent each")
	f.BoolVar(&exit, "exit", false, "stop after printing the results instead of serving the dashboard")
	f.DurationVar(&timeout, "timeout", 10*time.Minute, "give up when the runs take longer than this")
	return cmd
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

func splitList(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

// demoModel returns the model to benchmark: --model, else the trained
// fixture found next to the checkout, else a synthetic MoE of the trained
// fixture's geometry written once into the data dir.
func demoModel(ctx context.Context, env *Env, arg, dataDir string) (string, bool, error) {
	if arg != "" {
		return arg, false, nil
	}
	if p := findShared(trainedFixture); p != "" {
		return p, false, nil
	}
	out := filepath.Join(dataDir, "models", "synthetic-moe-f16.gguf")
	if _, err := os.Stat(out); err == nil {
		return out, true, nil
	}
	if err := os.MkdirAll(filepath.Dir(out), 0o755); err != nil {
		return "", false, err
	}
	cfg := model.SynthConfig{Arch: "qwen3moe", Layers: 6, Experts: 32, ExpertsUsed: 4, Hidden: 192, ExpertFFN: 128,
		Heads: 4, KVHeads: 2, Vocab: 4096, Context: 256, Type: tensor.F16, Seed: 7}
	if err := cfg.Defaults(); err != nil {
		return "", false, err
	}
	tmp := out + ".tmp"
	f, err := os.Create(tmp)
	if err != nil {
		return "", false, err
	}
	w := bufio.NewWriterSize(f, 1<<20)
	err = model.WriteSynthetic(w, cfg)
	if err == nil {
		err = w.Flush()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, out)
	}
	if err != nil {
		os.Remove(tmp)
		return "", false, fmt.Errorf("demo: write synthetic model: %w", err)
	}
	return out, true, nil
}

// findShared looks for ../shared/<rel> from the working directory and its
// parents (the checkout sits next to the shared fixtures).
func findShared(rel string) string {
	dir, err := os.Getwd()
	if err != nil {
		return ""
	}
	for {
		p := filepath.Join(dir, "..", "shared", rel)
		if _, err := os.Stat(p); err == nil {
			return filepath.Clean(p)
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return ""
		}
		dir = parent
	}
}

func uploadModel(ctx context.Context, cl *client.Client, path string) (string, int64, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", 0, err
	}
	defer f.Close()
	h := sha256.New()
	size, err := io.Copy(h, f)
	if err != nil {
		return "", 0, err
	}
	sum := hex.EncodeToString(h.Sum(nil))
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return "", 0, err
	}
	if _, _, err := cl.UploadArtifact(ctx, f, size, filepath.Base(path), sum); err != nil {
		return "", 0, fmt.Errorf("demo: upload model: %w", err)
	}
	return sum, size, nil
}

// putDemoSuite stores the smoke suite with the model replaced, as suite "demo".
func putDemoSuite(ctx context.Context, base, token, name, sum string, size int64) error {
	spec, err := jobs.Builtin("smoke")
	if err != nil {
		return err
	}
	spec.Name, spec.Suite = "demo", "demo"
	spec.Description = "The smoke suite on the model the demo uploaded."
	spec.Model = jobs.Model{Name: name, SHA256: sum, Size: jobs.ByteSize(size)}
	body, err := json.Marshal(map[string]any{"spec": spec})
	if err != nil {
		return err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPut, base+"/v1/suites/demo", bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode >= 300 {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		return fmt.Errorf("demo: PUT /v1/suites/demo: %s: %s", resp.Status, b)
	}
	return nil
}

// waitDevices waits until n devices are online.
func waitDevices(ctx context.Context, base string, n int) error {
	deadline := time.Now().Add(60 * time.Second)
	for {
		var out struct {
			Items []struct {
				State string `json:"state"`
			} `json:"items"`
		}
		if err := getJSON(ctx, base+"/v1/devices", &out); err == nil {
			online := 0
			for _, d := range out.Items {
				if d.State != "lost" && d.State != "offline" {
					online++
				}
			}
			if online >= n {
				return nil
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("demo: %d agent(s) did not register within 60s", n)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}

func getJSON(ctx context.Context, url string, out any) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	return json.NewDecoder(resp.Body).Decode(out)
}

// printDemoResults prints one row per (run, config) from GET /v1/runs/{id}.
func printDemoResults(ctx context.Context, w io.Writer, base string, runIDs []int64) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "run\tdevice\tconfig\tdecode tok/s\tstddev\tprefill tok/s\tTTFT ms\thit rate\trecall\tstall\tvalid\t")
	for _, id := range runIDs {
		var run api.RunDetail
		if err := getJSON(ctx, fmt.Sprintf("%s/v1/runs/%d", base, id), &run); err != nil {
			return fmt.Errorf("demo: read run %d: %w", id, err)
		}
		for _, r := range run.Results {
			valid := "yes"
			if !r.Valid {
				valid = "no: " + r.InvalidReason + r.Error
			}
			fmt.Fprintf(tw, "%d\t%s\t%s\t%.2f\t%.2f\t%.1f\t%.1f\t%.3f\t%.3f\t%.3f\t%s\t\n", id, run.DeviceID, r.ConfigKey,
				r.DecodeTPS.Mean, r.DecodeTPS.Stddev, r.PrefillTPS.Mean, r.TTFTms.Mean, r.HitRate, r.Recall, r.StallFraction, valid)
		}
	}
	return tw.Flush()
}
