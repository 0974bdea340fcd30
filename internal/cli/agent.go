package cli

import (
	"cmp"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/spf13/cobra"

	"github.com/lesfarm/lesfarm/agent"
	"github.com/lesfarm/lesfarm/coordinator/api/client"
	"github.com/lesfarm/lesfarm/jobs"
	"github.com/lesfarm/lesfarm/profile"
	"github.com/lesfarm/lesfarm/protocol"
)

func init() { register("agent", newAgentCmd) }

func newAgentCmd(env *Env) *cobra.Command {
	var (
		cfg       agent.Config
		labels    string
		hostID    string
		cacheMax  string
		bufMax    string
		batchMS   int
		gateTemp  float64
		gateWait  time.Duration
		noGate    bool
		logLevel  string
		printInfo bool
		server    string
		phones    adbFlags
	)
	var secrets []secretFlag // filled in with the flags below
	cmd := &cobra.Command{
		Use:   "agent --nats-url URL --name NAME [--profile phone-flagship] [--labels k=v,...] [--cache-dir DIR]",
		Short: "Run a host agent: register a device, take benchmark runs, stream telemetry",
		Long: `agent runs one farm agent on this machine. It connects to NATS, registers
the device with its fingerprint (platform, OS, CPU, RAM, storage, thermal and
battery state where readable), heartbeats at the TTL the coordinator chooses,
and runs the benchmark assignments it is given with the embedded LES runtime.
Telemetry streams to JetStream and is buffered on disk while NATS is down.

With --profile the agent emulates a phone's flash (a built-in storage profile:
` + strings.Join(profile.Builtin(), ", ") + `, or a YAML file): experts are read at
the profile's speed, RAM is capped at the profile's budget, and the
fingerprint marks the device as emulated ("emulated:<profile>") so its
results never mix with real devices' series. An emulated device also carries
the label lesfarm/host=--host-id (default: derived from this machine's
machine-id): the coordinator runs the emulated devices of one host one at a
time, since they share its CPUs. --profile twin:DEVICE_ID emulates
a fleet device from the profile it measured on itself ('lesfarm profile
measure --upload'), fetched from the coordinator at --server.

Stop it with Ctrl-C (SIGINT/SIGTERM): it aborts the current run, reports it,
flushes telemetry and exits.

lesfarm serve's embedded NATS authenticates devices: give the agent its
device's credential ('lesfarm token create --device NAME' prints it once)
with --device-token-file FILE, LESFARM_DEVICE_TOKEN or --device-token (which
shows in ps),
or --user NAME --password-file FILE. Before starting, the agent
connects once to check it and exits with a hint when NATS refuses it.

Examples:
  lesfarm agent --nats-url nats://127.0.0.1:4222 --name laptop-1 --device-token lfd_...
  lesfarm agent --nats-url nats://farm:4222 --name emu-flagship-1 --profile phone-flagship --labels pool=ci,lab=desk
  lesfarm agent --name x --print-fingerprint
  lesfarm agent --nats-url nats://farm:4222 --adb all --name lab1     # every attached Android phone (docs/phones.md)`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			lv := new(slog.LevelVar)
			if err := lv.UnmarshalText([]byte(logLevel)); err != nil {
				return usagef("--log-level %q invalid: use debug, info, warn or error", logLevel)
			}
			cfg.Logger = slog.New(slog.NewTextHandler(env.Stderr, &slog.HandlerOptions{Level: lv}))
			var err error
			for _, sf := range secrets {
				if *sf.value, err = resolveSecret(*sf.value, *sf.file, sf.env, sf.flag); err != nil {
					return usagef("%v", err)
				}
			}
			if cfg.Labels, err = parseLabels(labels); err != nil {
				return usagef("--labels: %v", err)
			}
			cfg.Labels = withHostLabel(cfg.Labels, cfg.Profile, hostID)
			if cacheMax != "" {
				n, err := jobs.ParseByteSize(cacheMax)
				if err != nil {
					return usagef("--cache-max %q: %v", cacheMax, err)
				}
				cfg.CacheMaxBytes = int64(n)
			}
			if bufMax != "" {
				n, err := jobs.ParseByteSize(bufMax)
				if err != nil {
					return usagef("--buffer-max %q: %v", bufMax, err)
				}
				cfg.BufferMaxBytes = int64(n)
			}
			if batchMS < 1 {
				return usagef("--batch-ms %d must be at least 1", batchMS)
			}
			if cfg.BatchEvents < 1 || cfg.BatchEvents > protocol.MaxSamplesPerBatch {
				return usagef("--batch-events %d must be in [1, %d]", cfg.BatchEvents, protocol.MaxSamplesPerBatch)
			}
			cfg.BatchInterval = time.Duration(batchMS) * time.Millisecond
			cfg.Gate = agent.ThermalGate{MaxTempC: gateTemp, Timeout: gateWait, Disabled: noGate}
			if cfg.CacheDir == "" {
				base, err := os.UserCacheDir()
				if err != nil {
					base = os.TempDir()
				}
				cfg.CacheDir = filepath.Join(base, "lesfarm", "agent-"+cfg.Name)
			}
			cfg.ServerURL = server // the calibrate suite uploads the measured profile there
			if id, ok := twinDevice(cfg.Profile); ok {
				c, err := client.New(server, cfg.ArtifactToken, client.WithCAFile(cfg.TLSCAFile))
				if err != nil {
					return usagef("--server: %v", err)
				}
				if cfg.Profile, err = resolveTwin(env.Ctx, c, server, id, cfg.CacheDir); err != nil {
					return err
				}
			}
			if phones.sel != "" {
				return phones.run(env, cfg, printInfo)
			}
			if printInfo {
				if cfg.NATSURL == "" {
					cfg.NATSURL = "nats://unused"
				}
				if cfg.Name == "" {
					cfg.Name = "fingerprint"
				}
			}
			if cfg.NATSURL == "" {
				return usagef("--nats-url is required: the NATS server of the farm, e.g. nats://127.0.0.1:4222")
			}
			if !protocol.ValidDeviceID(cfg.Name) {
				return usagef("--name %q invalid: give a device id of 1-64 letters, digits, '_' or '-'", cfg.Name)
			}
			a, err := agent.New(cfg)
			if err != nil {
				return usagef("%v", err)
			}
			if printInfo {
				b, err := json.Marshal(a.Fingerprint())
				if err != nil {
					return fmt.Errorf("fingerprint: %w", err)
				}
				fmt.Fprintf(env.Stdout, "%s\n", b)
				return nil
			}
			if err := checkNATSCredentials(&cfg); err != nil {
				return err
			}
			return a.Run(env.Ctx)
		},
	}
	f := cmd.Flags()
	// Secrets given as flags show in ps and shell history: each has a
	// -file flag and an environment variable too.
	var tokenFile, passwordFile, artifactTokenFile string
	secrets = []secretFlag{
		{&cfg.Token, &tokenFile, "LESFARM_DEVICE_TOKEN", "device-token"},
		{&cfg.Password, &passwordFile, "LESFARM_NATS_PASSWORD", "password"},
		{&cfg.ArtifactToken, &artifactTokenFile, "LESFARM_ARTIFACT_TOKEN", "artifact-token"},
	}
	f.StringVar(&tokenFile, "device-token-file", "", "file holding the NATS auth token / device credential (keeps it out of ps; env LESFARM_DEVICE_TOKEN works too)")
	f.StringVar(&passwordFile, "password-file", "", "file holding the NATS password (env LESFARM_NATS_PASSWORD works too)")
	f.StringVar(&artifactTokenFile, "artifact-token-file", "", "file holding the artifact download token (env LESFARM_ARTIFACT_TOKEN works too)")
	f.StringVar(&cfg.NATSURL, "nats-url", "", "NATS server URL of the farm (required), e.g. nats://127.0.0.1:4222")
	f.StringVar(&cfg.Name, "name", "", "device id, unique in the farm (required): letters, digits, '_' or '-'")
	f.StringVar(&cfg.Profile, "profile", "", "emulate a device: storage profile name ("+strings.Join(profile.Builtin(), ", ")+"), YAML file, or twin:DEVICE_ID (the fleet device's measured profile, from --server)")
	f.StringVar(&server, "server", cmp.Or(os.Getenv("LESFARM_SERVER"), "http://127.0.0.1:8080"), "coordinator base URL for --profile twin:ID and the calibrate suite's profile upload (env LESFARM_SERVER); --artifact-token is its bearer token")
	f.StringVar(&labels, "labels", "", "device labels as k=v,k=v (used by job device selectors)")
	f.StringVar(&hostID, "host-id", machineHostID(), "with --profile: the machine whose CPUs this emulated device shares (label lesfarm/host; the coordinator runs one host's emulated devices one at a time); 'none' opts out")
	f.StringVar(&cfg.CacheDir, "cache-dir", "", "directory for the model cache, packed models and the telemetry buffer (default: user cache dir/lesfarm/agent-NAME)")
	f.StringVar(&cacheMax, "cache-max", "20GiB", "size cap of the model cache (LRU eviction)")
	f.StringVar(&bufMax, "buffer-max", "64MiB", "size cap of the on-disk telemetry buffer used while NATS is unreachable")
	f.StringVar(&cfg.CredsFile, "creds", "", "NATS credentials file (.creds: JWT and nkey)")
	f.StringVar(&cfg.NKeySeedFile, "nkey", "", "file holding an nkey seed to authenticate with")
	f.StringVar(&cfg.User, "user", "", "NATS user name")
	f.StringVar(&cfg.Password, "password", "", "NATS password (prefer --creds)")
	f.StringVar(&cfg.Token, "device-token", "", "this device's NATS credential (visible in ps: prefer --device-token-file or LESFARM_DEVICE_TOKEN): for lesfarm serve's embedded NATS, the one 'lesfarm token create --device NAME' prints; else the NATS server's auth token")
	f.StringVar(&cfg.TLSCAFile, "ca", os.Getenv("LESFARM_CA"), "CA certificate (PEM) that signed the coordinator's certificate, e.g. the ca.pem of 'lesfarm tls init' (env LESFARM_CA): verifies the NATS server (enables TLS) and https:// artifact downloads")
	f.StringVar(&cfg.TLSCertFile, "tls-cert", "", "client certificate (PEM) for NATS mutual TLS")
	f.StringVar(&cfg.TLSKeyFile, "tls-key", "", "client key (PEM) for NATS mutual TLS")
	f.StringVar(&cfg.ArtifactToken, "artifact-token", "", "bearer token sent with model downloads from the coordinator")
	f.StringSliceVar(&cfg.ArtifactHosts, "artifact-host", nil, "hosts model downloads may come from, HOST or HOST:PORT (repeatable; default: the hosts of --nats-url and --server); list the coordinator's --artifact-url host when it differs")
	f.IntVar(&cfg.Threads, "threads", 0, "threads for the runtime's matrix products (0 = all CPUs)")
	f.BoolVar(&cfg.Direct, "direct", false, "read experts with O_DIRECT (bypass the page cache) where supported")
	f.BoolVar(&cfg.NoExec, "no-exec", false, "never execute downloaded build executables: run the embedded runtime only, taking runs of this agent's own embedded build (embedded-<revision>) and runs without a build")
	f.IntVar(&batchMS, "batch-ms", 500, "send a telemetry batch at least every N milliseconds")
	f.IntVar(&cfg.BatchEvents, "batch-events", 256, "send a telemetry batch when it holds M samples")
	f.Float64Var(&gateTemp, "thermal-max", 45, "thermal gate: wait before each repetition until every readable zone is at or below this °C")
	f.DurationVar(&gateWait, "thermal-timeout", 2*time.Minute, "thermal gate: give up waiting after this long (the result notes it)")
	f.BoolVar(&noGate, "no-thermal-gate", false, "do not wait for the device to cool down between repetitions")
	f.BoolVar(&cfg.Pin, "pin", false, "pin the measuring thread to one CPU (the highest this process may use) while a config runs")
	f.BoolVar(&cfg.DiscardOutliers, "discard-outliers", false, "drop repetitions whose decode tok/s lies beyond median ± 3·1.4826·MAD (needs >= 3 repetitions); results report how many were dropped")
	f.StringVar(&logLevel, "log-level", "info", "log level: debug, info, warn or error")
	f.BoolVar(&printInfo, "print-fingerprint", false, "print this device's fingerprint as JSON and exit")
	phones.register(f)
	aliasFlag(f, "token", "device-token") // the REST token is --token everywhere else
	aliasFlag(f, "token-file", "device-token-file")
	aliasFlag(f, "tls-ca", "ca")
	return cmd
}

// parseLabels parses "k=v,k=v".
func parseLabels(s string) (map[string]string, error) {
	out := map[string]string{}
	if strings.TrimSpace(s) == "" {
		return out, nil
	}
	for _, kv := range strings.Split(s, ",") {
		k, v, ok := strings.Cut(strings.TrimSpace(kv), "=")
		if !ok || k == "" {
			return nil, fmt.Errorf("%q is not key=value", kv)
		}
		if _, dup := out[k]; dup {
			return nil, fmt.Errorf("label %q given twice", k)
		}
		out[k] = v
	}
	return out, nil
}

// checkNATSCredentials connects once with the agent's credentials and
// returns a clear error when NATS refuses them, or when they do not let the
// agent receive its own device's assignments (a device credential of
// another device). The agent itself retries forever and would otherwise
// wait in silence. An unreachable server is not an error here: the agent
// retries until it comes up.
func checkNATSCredentials(cfg *agent.Config) error {
	opts := []nats.Option{nats.Name("lesfarm-agent " + cfg.Name + " (credential check)"), nats.Timeout(5 * time.Second), nats.MaxReconnects(0), nats.NoReconnect()}
	if cfg.CredsFile != "" {
		opts = append(opts, nats.UserCredentials(cfg.CredsFile))
	}
	if cfg.NKeySeedFile != "" {
		o, err := nats.NkeyOptionFromSeed(cfg.NKeySeedFile)
		if err != nil {
			return usagef("--nkey: %v", err)
		}
		opts = append(opts, o)
	}
	if cfg.User != "" {
		opts = append(opts, nats.UserInfo(cfg.User, cfg.Password))
	}
	if cfg.Token != "" {
		opts = append(opts, nats.Token(cfg.Token))
	}
	if cfg.TLSCAFile != "" {
		opts = append(opts, nats.RootCAs(cfg.TLSCAFile))
	}
	if cfg.TLSCertFile != "" {
		opts = append(opts, nats.ClientCert(cfg.TLSCertFile, cfg.TLSKeyFile))
	}
	denied := make(chan error, 1)
	opts = append(opts, nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
		if errors.Is(err, nats.ErrPermissionViolation) {
			select {
			case denied <- err:
			default:
			}
		}
	}))
	hint := fmt.Sprintf("create a device credential with 'lesfarm token create --device %s' and pass it with --token", cfg.Name)
	nc, err := nats.Connect(cfg.NATSURL, opts...)
	if err != nil {
		if errors.Is(err, nats.ErrAuthorization) || strings.Contains(strings.ToLower(err.Error()), "authorization violation") {
			return fmt.Errorf("agent: NATS at %s refused the credentials: %v; %s", cfg.NATSURL, err, hint)
		}
		if err := tlsMismatch(cfg.NATSURL, err); err != nil {
			return err
		}
		return nil
	}
	defer nc.Close()
	sub, err := nc.SubscribeSync(protocol.CancelSubject(cfg.Name))
	if err != nil {
		return nil
	}
	_ = nc.Flush()
	_ = sub.Unsubscribe()
	select {
	case err := <-denied:
		return fmt.Errorf("agent: NATS does not let these credentials act as device %q (%v); the credential belongs to another device: %s", cfg.Name, err, hint)
	case <-time.After(200 * time.Millisecond):
	}
	return nil
}

// secretFlag is a secret that may come from a flag, a file or the
// environment.
type secretFlag struct {
	value, file *string
	env, flag   string
}

// resolveSecret returns the secret from exactly one of the flag value, the
// file (trimmed) or the environment variable, in that order of precedence
// except that the flag and the file together are an error.
func resolveSecret(value, file, env, flag string) (string, error) {
	switch {
	case value != "" && file != "":
		return "", fmt.Errorf("give --%s or --%s-file, not both", flag, flag)
	case file != "":
		b, err := os.ReadFile(file)
		if err != nil {
			return "", fmt.Errorf("--%s-file: %v", flag, err)
		}
		v := strings.TrimSpace(string(b))
		if v == "" {
			return "", fmt.Errorf("--%s-file %s is empty", flag, file)
		}
		return v, nil
	case value != "":
		return value, nil
	}
	return strings.TrimSpace(os.Getenv(env)), nil
}

// tlsMismatch returns a clear error when err (from connecting to NATS at
// url) says the agent's TLS settings do not fit the server's, which no
// retry would fix; nil otherwise.
func tlsMismatch(url string, err error) error {
	var ua x509.UnknownAuthorityError
	var hn x509.HostnameError
	var ci x509.CertificateInvalidError
	switch {
	case errors.As(err, &ua):
		return fmt.Errorf("agent: NATS at %s speaks TLS with a certificate this agent does not trust: give the farm's CA with --ca FILE or LESFARM_CA (the ca.pem of 'lesfarm tls init'): %v", url, err)
	case errors.As(err, &hn):
		return fmt.Errorf("agent: NATS at %s: its TLS certificate is not for this host name; use a name it was issued for ('lesfarm tls init --host'): %v", url, err)
	case errors.As(err, &ci):
		return fmt.Errorf("agent: NATS at %s: its TLS certificate is not valid (expired?): %v", url, err)
	case errors.Is(err, nats.ErrSecureConnWanted):
		return fmt.Errorf("agent: NATS at %s does not speak TLS, but --ca (or LESFARM_CA) asks for it: %v", url, err)
	}
	return nil
}
