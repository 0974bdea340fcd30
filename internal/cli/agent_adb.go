package cli

import (
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/spf13/pflag"

	"github.com/lesfarm/lesfarm/agent"
	"github.com/lesfarm/lesfarm/agent/adb"
)

// adbFlags are lesfarm agent's flags for driving Android phones over adb
// (--adb SERIAL|all); docs/phones.md.
type adbFlags struct {
	sel, path, platform, clocks string
	pin                         string
	requireLocked               bool
	minBattery                  float64
	maxThermal                  int
	maxHeadroom, maxTemp        float64
	cooldown                    time.Duration
	evict                       string
	idle, poll                  time.Duration
	noRefBench                  bool
}

func (a *adbFlags) register(f *pflag.FlagSet) {
	f.StringVar(&a.sel, "adb", "", "drive Android phones over adb: a serial, serials separated by commas, or 'all'; one farm device per phone, named NAME-SERIAL (--name is the prefix, default 'phone')")
	f.StringVar(&a.path, "adb-path", "adb", "the adb executable")
	f.StringVar(&a.platform, "adb-platform", "linux/arm64", "with --adb: the build platform the phones run: linux/arm64 (static executables) or android/arm64")
	f.StringVar(&a.clocks, "adb-clocks", "fixed-performance", "with --adb: lock (rooted phones; restored after each run), fixed-performance (Android 11+) or free")
	f.BoolVar(&a.requireLocked, "adb-require-locked", false, "with --adb: attach only phones whose clocks can be locked (a phone that cannot is not a farm device; its status says why)")
	f.Float64Var(&a.minBattery, "adb-min-battery", 25, "with --adb: refuse a config below this battery percent (charging or not); negative disables")
	f.IntVar(&a.maxThermal, "adb-max-thermal-status", 1, "with --adb: cool down before a config while dumpsys thermalservice's status is above this (0 none .. 6 shutdown)")
	f.Float64Var(&a.maxHeadroom, "adb-max-headroom", 0.9, "with --adb: cool down before a config while dumpsys thermalservice's thermal headroom is above this (1.0 forecasts throttling); negative disables")
	f.Float64Var(&a.maxTemp, "adb-max-temp", 0, "with --adb: cool down before a config while the hottest thermal zone is above this many °C; 0 disables")
	f.DurationVar(&a.cooldown, "adb-cooldown-timeout", 2*time.Minute, "with --adb: how long a config waits for a hot phone to cool down before it is refused with the reason")
	f.StringVar(&a.evict, "adb-evict", agent.EvictFadvise, "with --adb: evict the model from the phone's page cache before each config: fadvise (no root), drop-caches (root: the whole page cache; else fadvise) or none; recorded on every result")
	f.DurationVar(&a.idle, "adb-idle", 0, "with --adb: wait this long before a run's first config (ExecuTorch waits 3m)")
	f.DurationVar(&a.poll, "adb-poll", 2*time.Second, "with --adb: how often adb devices is read for phones that come and go")
	f.StringVar(&a.pin, "adb-pin", "none", "with --adb: pin each config's runner with taskset to one CPU cluster: little, big (the fastest of more than one core), prime (the fastest), a cluster index (0 = slowest), or none; recorded on every result")
	f.BoolVar(&a.noRefBench, "adb-no-ref-bench", false, "with --adb: skip the reference microbenchmark before and after each config (no throttle detection)")
}

// run drives the phones until the context ends (or prints their
// fingerprints with --print-fingerprint).
func (a *adbFlags) run(env *Env, cfg agent.Config, printInfo bool) error {
	switch a.clocks {
	case "lock", "fixed-performance", "free":
	default:
		return usagef("--adb-clocks %q: use lock, fixed-performance or free", a.clocks)
	}
	if !agent.ValidPhonePin(a.pin) {
		return usagef("--adb-pin %q: use none, little, big, prime or a cluster index (0 = the slowest cluster)", a.pin)
	}
	switch a.evict {
	case agent.EvictFadvise, agent.EvictDropCaches, agent.EvictNone:
	default:
		return usagef("--adb-evict %q: use fadvise, drop-caches or none", a.evict)
	}
	if a.cooldown <= 0 {
		return usagef("--adb-cooldown-timeout %s: must be positive", a.cooldown)
	}
	if a.platform != "linux/arm64" && a.platform != "android/arm64" {
		return usagef("--adb-platform %q: use linux/arm64 or android/arm64", a.platform)
	}
	var serials []string
	if a.sel != "all" {
		for _, s := range strings.Split(a.sel, ",") {
			if s = strings.TrimSpace(s); s != "" {
				serials = append(serials, s)
			}
		}
	}
	c := &adb.Client{Path: a.path}
	if printInfo {
		ds, err := c.Devices(env.Ctx)
		if err != nil {
			return fmt.Errorf("%w (install Debian's adb package or pass --adb-path)", err)
		}
		for _, d := range ds {
			if len(serials) > 0 && !contains(serials, d.Serial) {
				continue
			}
			fp, _, err := adb.Fingerprint(env.Ctx, c, d.Serial)
			if err != nil {
				fmt.Fprintf(env.Stderr, "%s (%s): %v\n", d.Serial, d.State, err)
				continue
			}
			b, _ := json.Marshal(fp)
			fmt.Fprintf(env.Stdout, "%s\n", b)
		}
		return nil
	}
	if cfg.NATSURL == "" {
		return usagef("--nats-url is required: the NATS server of the farm, e.g. nats://127.0.0.1:4222")
	}
	if cfg.Name != "" && !validPrefix(cfg.Name) {
		return usagef("--name %q invalid: with --adb it prefixes each phone's device id (letters, digits, '_', '-')", cfg.Name)
	}
	return agent.RunPhones(env.Ctx, agent.PhonesConfig{Base: cfg, ADB: c, Serials: serials, Poll: a.poll,
		Phone: agent.PhoneConfig{ExecPlatform: a.platform, Hygiene: agent.PhoneHygiene{
			MinBattery: a.minBattery, Clocks: a.clocks, RequireLocked: a.requireLocked, MaxThermalStatus: a.maxThermal,
			MaxHeadroom: a.maxHeadroom, MaxTempC: a.maxTemp, CooldownTimeout: a.cooldown, Evict: a.evict,
			IdleBefore: a.idle, NoRefBench: a.noRefBench, Pin: a.pin}}})
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

func validPrefix(s string) bool {
	if len(s) > 40 {
		return false
	}
	for _, r := range s {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '_' || r == '-') {
			return false
		}
	}
	return true
}
