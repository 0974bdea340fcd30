package agent

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"strings"
	"sync"
	"time"

	"github.com/lesfarm/lesfarm/agent/adb"
	"github.com/lesfarm/lesfarm/agent/device"
	"github.com/lesfarm/lesfarm/jobs"
	"github.com/lesfarm/lesfarm/protocol"
)

// PhoneConfig makes an Agent the farm device of one Android phone driven
// over adb (Config.Phone; lesfarm agent --adb): the fingerprint is the
// phone's, and each run's build executable and model are pushed to the
// phone and run there with the runner protocol over `adb shell`.
type PhoneConfig struct {
	// ADB runs the adb client (required).
	ADB *adb.Client
	// Serial is the phone's adb serial (required).
	Serial string
	// ExecPlatform is the build platform the phone runs: "linux/arm64"
	// (static executables, the default) or "android/arm64".
	ExecPlatform string
	// Hygiene controls the phone's state around each config.
	Hygiene PhoneHygiene
}

// PhoneHygiene is what the agent controls on a phone around each config
// and records with its result (protocol.PhoneState). Zero fields take the
// defaults named.
type PhoneHygiene struct {
	// MinBattery refuses a config below this battery percent, charging or
	// not (default 25, as AndroidX's benchmark gate); negative disables.
	MinBattery float64
	// Clocks is "lock" (rooted phones: lockClocks.sh's way, restored
	// after the run), "fixed-performance" (the default; Android 11+, no
	// root) or "free". A lock that fails falls back to fixed performance,
	// unless RequireLocked.
	Clocks string
	// RequireLocked fails a run whose clocks cannot be locked.
	RequireLocked bool
	// MaxThermalStatus is the hottest `dumpsys thermalservice` status a
	// config may start at (default 1, light); hotter waits.
	MaxThermalStatus int
	// MaxHeadroom is the highest thermal headroom a config may start at
	// where the phone reports one (default 0.9; 1.0 forecasts throttling
	// at the current load); higher waits. Negative disables.
	MaxHeadroom float64
	// MaxTempC is the hottest zone (dumpsys thermalservice's temperatures
	// and /sys/class/thermal) a config may start at, in °C; hotter waits.
	// 0 disables it (the default: which zones a phone has, and how hot
	// they idle, is the OEM's).
	MaxTempC float64
	// CooldownTimeout bounds one wait for the phone to cool down (default
	// 2 m) and CooldownPoll is how often it re-reads (default 2 s). A
	// phone still hot at the timeout has its config refused with the
	// reason.
	CooldownTimeout, CooldownPoll time.Duration
	// Evict is how the model leaves the phone's page cache before each
	// config, so that its flash reads are real: EvictFadvise (the
	// default: the runner's posix_fadvise DONTNEED on the model file, no
	// root), EvictDropCaches (root: echo 3 > /proc/sys/vm/drop_caches,
	// else fadvise) or EvictNone. PhoneState.Eviction records what
	// happened.
	Evict string
	// ThrottleRatio: after a config the reference microbenchmark slower
	// than this × its baseline means throttled (default 1.10).
	ThrottleRatio float64
	// MaxReruns bounds the re-runs of a throttled config (default 1).
	MaxReruns int
	// RefIters sizes the reference microbenchmark (default 5000 shell
	// loop iterations, tens of ms on a phone); NoRefBench skips it.
	RefIters   int
	NoRefBench bool
	// IdleBefore waits this long before the first config of a run
	// (ExecuTorch waits 180 s); 0 means none.
	IdleBefore time.Duration
	// Pin pins each config's runner to one CPU cluster with taskset:
	// little, big, prime or a cluster index (PinCPUs); "" or none leaves
	// it free. The reference microbenchmark is not pinned.
	Pin string
}

// Values of PhoneHygiene.Evict (lesfarm agent --adb-evict).
const (
	EvictFadvise    = "fadvise"
	EvictDropCaches = "drop-caches"
	EvictNone       = "none"
)

// PhoneClocksLabel is the device label a phone's agent sets to the clock
// state it can hold (protocol.ClocksLocked, ClocksFixedPerformance or
// ClocksFree), probed when the phone is attached. A pool or run that
// requires locked clocks selects it (devices: {labels: {clocks:
// locked}}): the coordinator then never places the run on a phone whose
// clocks are fixed-performance or free, and says so in the run's waiting
// reason; an agent whose lock fails at run time fails such a run rather
// than fall back.
const PhoneClocksLabel = "clocks"

func (h *PhoneHygiene) defaults() {
	h.MinBattery = cmp.Or(h.MinBattery, 25)
	h.Clocks = cmp.Or(h.Clocks, "fixed-performance")
	h.MaxThermalStatus = cmp.Or(h.MaxThermalStatus, 1)
	h.MaxHeadroom = cmp.Or(h.MaxHeadroom, 0.9)
	h.Evict = cmp.Or(h.Evict, EvictFadvise)
	h.CooldownTimeout = cmp.Or(h.CooldownTimeout, 2*time.Minute)
	h.CooldownPoll = cmp.Or(h.CooldownPoll, 2*time.Second)
	h.ThrottleRatio = cmp.Or(h.ThrottleRatio, 1.10)
	h.MaxReruns = cmp.Or(h.MaxReruns, 1)
	h.RefIters = cmp.Or(h.RefIters, 5000)
}

// errPhoneLost marks a run that failed because its phone went away or adb
// failed: an infrastructure failure, reported as aborted so the
// coordinator requeues it.
var errPhoneLost = errors.New("phone lost")

// phone is an attached phone of an Agent.
type phone struct {
	cfg      PhoneConfig
	id       *adb.Identity
	baseline time.Duration // the reference microbenchmark at attach
	clocks   string        // the clock state probed at attach (PhoneClocksLabel)
	pinCPUs  []int         // the CPUs of Hygiene.Pin's cluster; nil: not pinned

	mu   sync.Mutex
	last *protocol.PhoneSnapshot // the latest state read from the phone
}

// seen records s as the phone's latest state (hellos and heartbeats
// report it).
func (p *phone) seen(s *protocol.PhoneSnapshot) {
	if s == nil {
		return
	}
	p.mu.Lock()
	p.last = s
	p.mu.Unlock()
}

// deviceState is the state hellos and heartbeats report: a phone's own
// latest reading (taken at attach and around each config, and every
// CooldownPoll while it cools down; its read_at says how old it is), the
// host's for any other agent. Reading the phone on every heartbeat would
// put an adb round trip in the lease's path.
func (a *Agent) deviceState() protocol.DeviceState {
	if a.phone == nil {
		return device.ReadState(device.Options{Root: a.rootForState()})
	}
	a.phone.mu.Lock()
	s := a.phone.last
	a.phone.mu.Unlock()
	return PhoneDeviceState(s)
}

// androidThermal names dumpsys thermalservice's statuses.
var androidThermal = [...]string{"none", "light", "moderate", "severe", "critical", "emergency", "shutdown"}

// PhoneDeviceState is snapshot s as the device state of hellos and
// heartbeats: battery, charging, battery and hottest temperatures, and
// the thermal status by Android's name ("none" ... "shutdown"). A nil s
// is an empty state.
func PhoneDeviceState(s *protocol.PhoneSnapshot) protocol.DeviceState {
	if s == nil {
		return protocol.DeviceState{}
	}
	st := protocol.DeviceState{MaxTempC: s.MaxTempC, BatteryPercent: s.BatteryPercent, Charging: s.Charging, BatteryTempC: s.BatteryTempC, ReadAt: s.ReadAt}
	if t := s.ThermalStatus; t != nil && *t >= 0 && *t < len(androidThermal) {
		st.ThermalStatus = androidThermal[*t]
	}
	return st
}

// Remote layout under adb.RemoteDir.
const (
	phoneBinDir   = adb.RemoteDir + "/bin"
	phoneModelDir = adb.RemoteDir + "/models"
	phoneWorkDir  = adb.RemoteDir + "/work"
	phonePIDFile  = adb.RemoteDir + "/run/runner.pid"
)

// attachPhone reads the phone's fingerprint into a.fp (keeping the agent's
// own build fields), kills a runner a previous agent left running there,
// restores clocks a crashed agent left locked, and measures the reference
// microbenchmark's baseline.
func (a *Agent) attachPhone(ctx context.Context) error {
	pc := *a.cfg.Phone
	if pc.ADB == nil || pc.Serial == "" {
		return errors.New("agent config: a phone needs an adb client and a serial")
	}
	pc.ExecPlatform = cmp.Or(pc.ExecPlatform, "linux/arm64")
	pc.Hygiene.defaults()
	fp, id, err := adb.Fingerprint(ctx, pc.ADB, pc.Serial)
	if err != nil {
		return err
	}
	fp.AgentBuild, fp.RuntimeBuild, fp.GoVersion = a.fp.AgentBuild, a.fp.RuntimeBuild, a.fp.GoVersion
	// The agent's embedded runtime runs on the host, not on the phone: a
	// phone runs build executables only.
	fp.ExecPlatform = pc.ExecPlatform
	if a.cfg.NoExec {
		return errors.New("agent config: a phone runs build executables; --no-exec cannot drive one")
	}
	a.fp = fp
	p := &phone{cfg: pc, id: id}
	if _, err := pc.ADB.Shell(ctx, pc.Serial, "mkdir -p "+phoneBinDir+" "+phoneModelDir+" "+phoneWorkDir+" "+adb.RemoteDir+"/run && "+killRunnerScript); err != nil {
		return fmt.Errorf("phone %s: preparing %s: %w", pc.Serial, adb.RemoteDir, err)
	}
	if ok, err := adb.RestoreClocks(ctx, pc.ADB, pc.Serial); err != nil {
		a.log.Warn("agent: phone: restoring clocks left locked", "serial", pc.Serial, "err", err)
	} else if ok {
		a.log.Info("agent: phone: restored the clocks a previous agent left locked", "serial", pc.Serial)
	}
	s, err := adb.Snapshot(ctx, pc.ADB, pc.Serial)
	if err == nil {
		p.seen(s)
	}
	if pin := pc.Hygiene.Pin; pin != "" && pin != protocol.PinNone {
		if err != nil {
			return fmt.Errorf("phone %s: reading its CPU clusters to pin %s: %w", pc.Serial, pin, err)
		}
		if p.pinCPUs, err = PinCPUs(s.Clusters, pin); err != nil {
			return fmt.Errorf("phone %s: %w", pc.Serial, err)
		}
	}
	// Probe the clock state the phone can hold (and restore it): it is the
	// device's clocks label, by which a pool can require locked clocks.
	a.phone = p
	state, _, restore, err := a.setPhoneClocks(ctx, pc.Hygiene.RequireLocked)
	if err != nil {
		a.phone = nil
		return err
	}
	restore()
	p.clocks = state
	labels := maps.Clone(a.cfg.Labels)
	if labels == nil {
		labels = map[string]string{}
	}
	labels[PhoneClocksLabel] = state
	a.cfg.Labels = labels
	if !pc.Hygiene.NoRefBench {
		for range 3 {
			d, err := adb.RefBench(ctx, pc.ADB, pc.Serial, pc.Hygiene.RefIters)
			if err != nil {
				return fmt.Errorf("phone %s: reference benchmark: %w", pc.Serial, err)
			}
			if p.baseline == 0 || d < p.baseline {
				p.baseline = d
			}
		}
	}
	a.phone = p
	a.log.Info("agent: phone attached", "serial", pc.Serial, "fingerprint", fp.String(), "build_fingerprint", id.BuildFingerprint,
		"ref_baseline", p.baseline.String(), "clocks", p.clocks, "pinned_cpus", fmt.Sprint(p.pinCPUs))
	return nil
}

// killRunnerScript kills the runner's process group on the phone by its
// pid file (left by a runner whose session died, or being cancelled).
const killRunnerScript = `p=$(cat ` + phonePIDFile + ` 2>/dev/null); if [ -n "$p" ]; then kill -9 -$p 2>/dev/null; rm -f ` + phonePIDFile + `; fi; true`

// runOnPhone runs job's configs on the phone, one runner per config, with
// the phone's hygiene around each (phonehygiene.go).
func (a *Agent) runOnPhone(ctx context.Context, r *activeRun, job *Job, prov *protocol.Provenance, onDownload func(done, total int64)) ([]protocol.ConfigResult, error) {
	p, asg := a.phone, r.asg
	c, serial := p.cfg.ADB, p.cfg.Serial
	x := asg.Executable
	if x == nil {
		return nil, fmt.Errorf("phone %s runs build executables only; this run names no executable (build %q)", serial, asg.Build)
	}
	h, err := a.executable(ctx, x, onDownload)
	if err != nil {
		return nil, err
	}
	defer h.Release()
	exe, err := adb.Install(ctx, c, serial, adb.InstallSpec{Local: h.Path, SHA256: x.Artifact.SHA256, Size: x.Artifact.Size, Dir: phoneBinDir, Exec: true})
	if err != nil {
		return nil, a.phoneErr(err)
	}
	model, err := adb.Install(ctx, c, serial, adb.InstallSpec{Local: job.ModelPath, SHA256: asg.Artifact.SHA256, Size: asg.Artifact.Size, Dir: phoneModelDir, Name: asg.Artifact.SHA256 + ".gguf"})
	if err != nil {
		return nil, a.phoneErr(err)
	}
	a.log.Info("agent: phone payload ready", "serial", serial, "executable", exe.Path, "executable_cached", exe.Cached, "model", model.Path, "model_cached", model.Cached)
	return a.phoneConfigs(ctx, job, exe.Path, model.Path, prov)
}

// phoneConfigs runs job's configs with the executable and model at their
// phone paths: it sets the clocks for the run (restored at the end), waits
// IdleBefore, and runs each config with its hygiene (phoneConfig),
// recording the clock state on each result.
func (a *Agent) phoneConfigs(ctx context.Context, job *Job, exePath, modelPath string, prov *protocol.Provenance) ([]protocol.ConfigResult, error) {
	p := a.phone
	rr := *a.runner
	rr.WorkDir, rr.Profile = phoneWorkDir, nil // the phone's own storage
	rr.EvictModel = p.cfg.Hygiene.Evict != EvictNone
	require := p.cfg.Hygiene.RequireLocked || job.Spec != nil && job.Spec.Devices.Labels[PhoneClocksLabel] == protocol.ClocksLocked
	clocks, lockedKHz, restore, err := a.setPhoneClocks(ctx, require)
	if err != nil {
		return nil, err
	}
	defer restore()
	if d := p.cfg.Hygiene.IdleBefore; d > 0 {
		select {
		case <-ctx.Done():
			return nil, context.Cause(ctx)
		case <-time.After(d):
		}
	}
	var out []protocol.ConfigResult
	for i, cfg := range job.Configs {
		if job.OnConfig != nil {
			job.OnConfig(i, cfg)
		}
		sub := *job
		sub.ModelPath, sub.Configs, sub.OnConfig, sub.OnResult = modelPath, []jobs.Config{cfg}, nil, nil
		res, err := a.phoneConfig(ctx, &rr, &sub, exePath, prov)
		if err != nil {
			return out, err
		}
		res.PhoneState.Clocks, res.PhoneState.LockedKHz = clocks, lockedKHz
		if clocks == protocol.ClocksFree {
			res.PhoneState.Flags = append(res.PhoneState.Flags, protocol.PhoneFlagFreeClocks)
		}
		out = append(out, *res)
		if job.OnResult != nil {
			job.OnResult(*res)
		}
	}
	return out, nil
}

// runConfigOnPhone runs one config's runner on the phone over adb shell.
func (a *Agent) runConfigOnPhone(ctx context.Context, rr *Runner, job *Job, exePath string, prov *protocol.Provenance) (*protocol.ConfigResult, error) {
	p := a.phone
	c, serial := p.cfg.ADB, p.cfg.Serial
	run := exePath
	if len(p.pinCPUs) > 0 {
		run = "taskset " + cpuMask(p.pinCPUs) + " " + exePath
	}
	script := "cd " + phoneWorkDir + " && exec setsid -w sh -c 'echo $$ > " + phonePIDFile + "; " + run + " runner; rc=$?; rm -f " + phonePIDFile + "; exit $rc'"
	cmd := c.Command(serial, "shell", "-T", script)
	cc := ChildCommand{Path: cmd.Path, Args: cmd.Args[1:], Env: c.Env, Remote: true,
		Kill: func() {
			kctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			if _, err := c.Shell(kctx, serial, killRunnerScript); err != nil && !errors.Is(err, adb.ErrNotFound) {
				a.log.Warn("agent: phone: killing the runner", "serial", serial, "err", err)
			}
		},
		Transport: func() error {
			tctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			st, err := c.State(tctx, serial)
			if err == nil && st == adb.StateDevice {
				return nil
			}
			return fmt.Errorf("%w: %s went away mid-run (adb: state %q, %v)", errPhoneLost, serial, st, err)
		}}
	lim := ChildLimits{}
	if !a.currentDeadline().IsZero() {
		lim.Timeout = max(time.Until(a.currentDeadline())-childDeadlineMargin, time.Until(a.currentDeadline())/2)
	}
	res, info, err := rr.RunCommand(ctx, cc, job, lim)
	if info != nil {
		prov.RunnerRevision, prov.RunnerGoVersion, prov.RunnerProtocol = info.Revision, info.GoVersion, info.Protocol
		if be := (*BuildError)(nil); errors.As(err, &be) {
			prov.StderrTail = clipTail(info.StderrTail, protocol.MaxStderrTail)
			if info.Protocol == 0 && (strings.Contains(info.StderrTail, "Permission denied") || strings.Contains(be.Reason, "status 126")) {
				return nil, fmt.Errorf("phone %s cannot execute %s (is %s mounted noexec?): %s", serial, exePath, adb.RemoteDir, be.Reason)
			}
		}
	}
	if err != nil {
		return nil, err
	}
	if len(res) != 1 {
		return nil, fmt.Errorf("phone %s: runner reported %d results for one config", serial, len(res))
	}
	return &res[0], nil
}

// currentDeadline is the current run's deadline (zero: none).
func (a *Agent) currentDeadline() time.Time {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.current == nil {
		return time.Time{}
	}
	return a.current.deadline
}

// phoneErr marks an adb failure that says the phone is gone or unusable
// as errPhoneLost (an infrastructure failure).
func (a *Agent) phoneErr(err error) error {
	if errors.Is(err, adb.ErrNotFound) || errors.Is(err, adb.ErrUnavailable) || errors.Is(err, adb.ErrNoADB) {
		return fmt.Errorf("%w: %w", errPhoneLost, err)
	}
	return err
}
