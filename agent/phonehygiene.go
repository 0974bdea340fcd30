package agent

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/lesfarm/lesfarm/agent/adb"
	"github.com/lesfarm/lesfarm/protocol"
)

// setPhoneClocks puts the phone's clocks in the configured state for a
// run and returns that state, the locked frequency and the function that
// restores the clocks afterwards. With require, clocks that cannot be
// locked are an error instead of a fall back to fixed performance mode.
func (a *Agent) setPhoneClocks(ctx context.Context, require bool) (string, int64, func(), error) {
	p := a.phone
	c, serial, h := p.cfg.ADB, p.cfg.Serial, p.cfg.Hygiene
	bg := func() (context.Context, context.CancelFunc) {
		return context.WithTimeout(context.Background(), 30*time.Second)
	}
	if h.Clocks == "lock" {
		khz, err := adb.LockClocks(ctx, c, serial)
		if err == nil {
			a.log.Info("agent: phone clocks locked", "serial", serial, "khz", khz)
			return protocol.ClocksLocked, khz, func() {
				rctx, cancel := bg()
				defer cancel()
				if _, err := adb.RestoreClocks(rctx, c, serial); err != nil {
					a.log.Warn("agent: phone: restoring clocks", "serial", serial, "err", err)
				}
			}, nil
		}
		if require {
			return "", 0, nil, a.phoneErr(fmt.Errorf("phone %s: locked clocks are required: %w", serial, err))
		}
		a.log.Warn("agent: phone clocks not locked; trying fixed performance mode", "serial", serial, "err", err)
	} else if require {
		return "", 0, nil, fmt.Errorf("phone %s: locked clocks are required, but this agent runs with --adb-clocks %s (use --adb-clocks lock on a rooted phone)", serial, h.Clocks)
	}
	if h.Clocks == "lock" || h.Clocks == "fixed-performance" {
		if err := adb.SetFixedPerformance(ctx, c, serial, true); err == nil {
			return protocol.ClocksFixedPerformance, 0, func() {
				rctx, cancel := bg()
				defer cancel()
				_ = adb.SetFixedPerformance(rctx, c, serial, false)
			}, nil
		} else {
			a.log.Warn("agent: phone fixed performance mode refused; clocks are free", "serial", serial, "err", err)
		}
	}
	return protocol.ClocksFree, 0, func() {}, nil
}

// phoneConfig runs one config on the phone with its hygiene: the battery
// gate, the thermal wait, the reference microbenchmark before and after,
// the phone's state at the start and end, and re-runs while the phone
// came out throttled (at most MaxReruns). A refused config is a result
// with an error, not a failed run.
func (a *Agent) phoneConfig(ctx context.Context, rr *Runner, job *Job, exePath string, prov *protocol.Provenance) (*protocol.ConfigResult, error) {
	p := a.phone
	c, serial, h := p.cfg.ADB, p.cfg.Serial, p.cfg.Hygiene
	cfg := job.Configs[0]
	ps := &protocol.PhoneState{Serial: serial, BuildFingerprint: p.id.BuildFingerprint, RefBaselineNS: int64(p.baseline),
		Pin: cmp.Or(h.Pin, protocol.PinNone), PinnedCPUs: p.pinCPUs}
	if p.id.Emulator {
		ps.Flags = append(ps.Flags, protocol.PhoneFlagEmulator)
	}
	if p.id.Debuggable {
		ps.Flags = append(ps.Flags, protocol.PhoneFlagDebuggable)
	}
	refused := func(why string) *protocol.ConfigResult {
		a.log.Warn("agent: phone config refused", "serial", serial, "config_key", cfg.Key, "reason", why)
		return &protocol.ConfigResult{ConfigIndex: cfg.Index, ConfigKey: cfg.Key, Error: why, InvalidReason: why, PhoneState: ps}
	}
	for attempt := 0; ; attempt++ {
		start, before, waited, err := a.phoneCool(ctx)
		ps.CooldownMS += waited.Milliseconds()
		if waited > 0 {
			ps.Flags = appendOnce(ps.Flags, protocol.PhoneFlagCooledDown)
		}
		ps.Start = start
		if err != nil {
			if start != nil && ctx.Err() == nil && !errors.Is(err, errPhoneLost) {
				return refused(err.Error()), nil
			}
			return nil, err
		}
		if why := batteryGate(start, h.MinBattery); why != "" {
			return refused(why), nil
		}
		ps.RefBeforeNS = int64(before)
		dropped := h.Evict == EvictDropCaches && a.dropPhoneCaches(ctx)
		res, err := a.runConfigOnPhone(ctx, rr, job, exePath, prov)
		if err != nil {
			return nil, err
		}
		ps.Eviction = evictionOf(dropped, res)
		end, after, err := adb.SnapshotBench(ctx, c, serial, p.refIters())
		if err != nil {
			return nil, a.phoneErr(err)
		}
		ps.End = end
		p.seen(end)
		if t := end.ThermalStatus; t != nil && *t >= 2 {
			ps.Flags = appendOnce(ps.Flags, protocol.PhoneFlagHotAtFinish)
		}
		throttled := false
		if !h.NoRefBench {
			ps.RefAfterNS = int64(after)
			throttled = Throttled(p.baseline, after, h.ThrottleRatio)
		}
		if throttled && attempt < h.MaxReruns {
			ps.Reruns++
			a.log.Warn("agent: phone throttled after the config; cooling down and re-running it", "serial", serial, "config_key", cfg.Key,
				"ref_after", time.Duration(ps.RefAfterNS).String(), "ref_baseline", p.baseline.String())
			waited, err := a.phoneUnthrottle(ctx)
			ps.CooldownMS += waited.Milliseconds()
			if err != nil {
				return nil, err
			}
			continue
		}
		if throttled {
			ps.Flags = appendOnce(ps.Flags, protocol.PhoneFlagThrottled)
		}
		res.PhoneState = ps
		return res, nil
	}
}

// batteryGate is why a config may not start at snapshot s with the gate
// at minPct percent (AndroidX's: charging or not), "" when it may. A
// battery that cannot be read, or a gate ≤ 0, lets it start.
func batteryGate(s *protocol.PhoneSnapshot, minPct float64) string {
	b := s.BatteryPercent
	if minPct <= 0 || b == nil || *b >= minPct {
		return ""
	}
	state := "not charging"
	if s.Charging != nil && *s.Charging {
		state = "charging"
	}
	return fmt.Sprintf("battery at %.0f%% (%s), below the %.0f%% gate (charging or not)", *b, state, minPct)
}

// thermalGate is why a config may not start yet at snapshot s under h's
// thermal gate, "" when it may: a thermal status above MaxThermalStatus,
// a headroom above MaxHeadroom (≥ 0), or a zone hotter than MaxTempC
// (> 0). Values the phone does not report never hold a config back.
func thermalGate(s *protocol.PhoneSnapshot, h PhoneHygiene) string {
	var why []string
	if st := s.ThermalStatus; st != nil && *st > h.MaxThermalStatus {
		name := ""
		if *st < len(androidThermal) {
			name = " (" + androidThermal[*st] + ")"
		}
		why = append(why, fmt.Sprintf("thermal status %d%s above the gate's %d", *st, name, h.MaxThermalStatus))
	}
	if hr := s.ThermalHeadroom; hr != nil && h.MaxHeadroom >= 0 && *hr > h.MaxHeadroom {
		why = append(why, fmt.Sprintf("thermal headroom %.2f above the gate's %.2f", *hr, h.MaxHeadroom))
	}
	if t := s.MaxTempC; t != nil && h.MaxTempC > 0 && *t > h.MaxTempC {
		why = append(why, fmt.Sprintf("hottest zone at %.1f °C above the gate's %.1f °C", *t, h.MaxTempC))
	}
	return strings.Join(why, ", ")
}

// dropPhoneCaches drops the phone's page cache as root before a config
// (PhoneHygiene.Evict drop-caches) and reports whether it did; a phone
// without root falls back to the runner's fadvise, with a warning.
func (a *Agent) dropPhoneCaches(ctx context.Context) bool {
	p := a.phone
	if err := adb.DropCaches(ctx, p.cfg.ADB, p.cfg.Serial); err != nil {
		a.log.Warn("agent: phone: page cache not dropped; the runner evicts the model with fadvise", "serial", p.cfg.Serial, "err", err)
		return false
	}
	return true
}

// evictionOf is PhoneState.Eviction of a config's result: drop_caches
// when the agent dropped the phone's page cache, fadvise when the runner
// says it evicted the model (its page_cache_evicted metric), none
// otherwise (eviction off, or a build whose runner does not evict).
func evictionOf(dropped bool, res *protocol.ConfigResult) string {
	switch {
	case dropped:
		return protocol.EvictionDropCaches
	case res.Extra["page_cache_evicted"] == 1:
		return protocol.EvictionFadvise
	}
	return protocol.EvictionNone
}

// Throttled reports whether a reference microbenchmark time after a
// config shows a throttled device: slower than ratio × its baseline
// (AndroidX's throttle detector uses 1.10). A zero baseline never is.
func Throttled(baseline, after time.Duration, ratio float64) bool {
	return baseline > 0 && float64(after) > ratio*float64(baseline)
}

// refIters is the reference microbenchmark's size, 0 when it is off.
func (p *phone) refIters() int {
	if p.cfg.Hygiene.NoRefBench {
		return 0
	}
	return p.cfg.Hygiene.RefIters
}

// phoneCool waits until the phone passes the thermal gate (thermalGate:
// status, headroom, hottest zone), re-reading every CooldownPoll for at
// most CooldownTimeout, and returns the last state read, the reference
// microbenchmark run with it, and how long it waited. A phone still hot
// at the timeout is an error with the state and the reason.
func (a *Agent) phoneCool(ctx context.Context) (*protocol.PhoneSnapshot, time.Duration, time.Duration, error) {
	p := a.phone
	c, serial, h := p.cfg.ADB, p.cfg.Serial, p.cfg.Hygiene
	t0 := time.Now()
	logged := false
	for {
		s, ref, err := adb.SnapshotBench(ctx, c, serial, p.refIters())
		if err != nil {
			return nil, 0, time.Since(t0), a.phoneErr(err)
		}
		p.seen(s)
		why := thermalGate(s, h)
		if why == "" {
			waited := time.Duration(0)
			if logged {
				waited = time.Since(t0)
			}
			return s, ref, waited, nil
		}
		if time.Since(t0) >= h.CooldownTimeout {
			return s, ref, time.Since(t0), fmt.Errorf("phone still hot after %s of cooling down: %s", h.CooldownTimeout, why)
		}
		if !logged {
			a.log.Info("agent: phone too hot; cooling down", "serial", serial, "reason", why, "timeout", h.CooldownTimeout.String())
			a.setCoolingMessage("cooling down: " + why)
			logged = true
		}
		select {
		case <-ctx.Done():
			return s, 0, time.Since(t0), context.Cause(ctx)
		case <-time.After(h.CooldownPoll):
		}
	}
}

// phoneUnthrottle waits, re-running the reference microbenchmark every
// CooldownPoll for at most CooldownTimeout, until the phone is no longer
// throttled, and returns how long it waited (a phone still throttled at
// the timeout is re-run anyway; its result then carries the flag).
func (a *Agent) phoneUnthrottle(ctx context.Context) (time.Duration, error) {
	p := a.phone
	c, serial, h := p.cfg.ADB, p.cfg.Serial, p.cfg.Hygiene
	t0 := time.Now()
	a.setCoolingMessage("cooling down: throttled")
	for time.Since(t0) < h.CooldownTimeout {
		select {
		case <-ctx.Done():
			return time.Since(t0), context.Cause(ctx)
		case <-time.After(h.CooldownPoll):
		}
		d, err := adb.RefBench(ctx, c, serial, h.RefIters)
		if err != nil {
			return time.Since(t0), a.phoneErr(err)
		}
		if !Throttled(p.baseline, d, h.ThrottleRatio) {
			break
		}
	}
	return time.Since(t0), nil
}

// setCoolingMessage shows why the current run waits in the agent's status.
func (a *Agent) setCoolingMessage(msg string) {
	a.mu.Lock()
	if r := a.current; r != nil {
		r.message = msg
	}
	a.mu.Unlock()
}

func appendOnce(flags []string, f string) []string {
	for _, x := range flags {
		if x == f {
			return flags
		}
	}
	return append(flags, f)
}
