package adb

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/lesfarm/lesfarm/protocol"
)

// stateScript prints, in @@ sections, everything Snapshot reads. Files
// are read with the shell's read builtin, not $(cat ...): a fork and exec
// per file made a snapshot cost tens of processes, most of the agent's
// overhead per config.
const stateScript = `echo @@battery; dumpsys battery; echo @@thermal; dumpsys thermalservice; echo @@cpu; ` +
	`for d in /sys/devices/system/cpu/cpufreq/policy*; do echo "policy $d"; ` +
	`for k in cpus:related_cpus gov:scaling_governor cur:scaling_cur_freq max:cpuinfo_max_freq; do v=; read -r v < $d/${k#*:}; echo "${k%%:*} $v"; done; ` +
	`if [ -r $d/stats/time_in_state ]; then while read f t; do echo "tis $f $t"; done < $d/stats/time_in_state; fi; done; ` +
	`echo @@zones; for z in /sys/class/thermal/thermal_zone*; do n=; c=; read -r n < $z/type; read -r c < $z/temp; echo "zone $n $c"; done`

// Snapshot reads serial's state now: battery, thermal status and zones,
// and each cpufreq policy's governor, current frequency and time_in_state,
// in one adb round trip. Parts the phone does not expose stay nil; only a
// failed adb call is an error.
func Snapshot(ctx context.Context, c *Client, serial string) (*protocol.PhoneSnapshot, error) {
	out, err := c.Shell(ctx, serial, stateScript+" 2>/dev/null; true")
	if err != nil {
		return nil, err
	}
	return ParseSnapshot(string(out), time.Now().UTC()), nil
}

// ParseSnapshot reads the output of the state script.
func ParseSnapshot(out string, at time.Time) *protocol.PhoneSnapshot {
	sec := sections(out)
	s := &protocol.PhoneSnapshot{ReadAt: at}
	if b, err := ParseBattery(sec["battery"]); err == nil {
		s.BatteryPercent, s.BatteryTempC, s.Charging = b.Percent, b.TempC, b.Charging
	}
	if t, err := ParseThermal(sec["thermal"]); err == nil {
		s.ThermalStatus, s.ThermalHeadroom = t.Status, t.Headroom
		s.MaxTempC = t.MaxTempC
	}
	if z := ParseZones(sec["zones"]); z != nil && (s.MaxTempC == nil || *z > *s.MaxTempC) {
		s.MaxTempC = z
	}
	s.Clusters = ParseClusters(sec["cpu"])
	return s
}

// SnapshotBench is Snapshot and, when iters > 0, RefBench after it, in
// one adb round trip (the agent's per-config overhead is mostly round
// trips). The duration is 0 when iters is 0.
func SnapshotBench(ctx context.Context, c *Client, serial string, iters int) (*protocol.PhoneSnapshot, time.Duration, error) {
	script := stateScript + " 2>/dev/null; true"
	if iters > 0 {
		script += "; echo @@ref; " + refScript(iters)
	}
	out, err := c.Shell(ctx, serial, script)
	if err != nil {
		return nil, 0, err
	}
	s := ParseSnapshot(string(out), time.Now().UTC())
	if iters == 0 {
		return s, 0, nil
	}
	d, err := parseRef(sections(string(out))["ref"])
	return s, d, err
}

func refScript(iters int) string {
	return fmt.Sprintf(`s=$(date +%%s%%N); i=0; while [ $i -lt %d ]; do i=$((i+1)); done; e=$(date +%%s%%N); echo $((e-s))`, iters)
}

func parseRef(out string) (time.Duration, error) {
	ns, err := strconv.ParseInt(strings.TrimSpace(out), 10, 64)
	if err != nil || ns <= 0 {
		return 0, errors.New("reference benchmark: the phone's date has no nanoseconds (" + clip(strings.TrimSpace(out), 40) + ")")
	}
	return time.Duration(ns), nil
}

// SetFixedPerformance turns Android's fixed performance mode on or off
// (`cmd power set-fixed-performance-mode-enabled`, Android 11+, no root).
func SetFixedPerformance(ctx context.Context, c *Client, serial string, on bool) error {
	out, err := c.Shell(ctx, serial, "cmd power set-fixed-performance-mode-enabled "+strconv.FormatBool(on)+" 2>&1")
	if err != nil {
		return err
	}
	if s := strings.ToLower(string(out)); strings.Contains(s, "unknown") || strings.Contains(s, "error") || strings.Contains(s, "exception") {
		return fmt.Errorf("phone %s: fixed performance mode: %s", serial, clip(strings.TrimSpace(string(out)), 200))
	}
	return nil
}

// savedClocks is where LockClocks saves what it changed, so that a later
// agent restores it after a crash (RestoreClocks).
const savedClocks = RemoteDir + "/clocks.saved"

// thermalDaemons are the services lockClocks.sh stops while clocks are
// locked (those a phone does not have are skipped).
const thermalDaemons = "thermal-engine perfd vendor.thermal-engine vendor.perfd thermald mpdecision vendor.perf-hal-1-0 vendor.perf-hal-2-0"

// LockClocks locks a rooted phone's clocks as AndroidX's lockClocks.sh
// does: it saves every policy's governor and limits to RemoteDir, picks
// the cluster with the highest max frequency, sets the userspace governor
// on it with every limit at the lowest available frequency ≥ 50% of its
// max, and stops the thermal and perf daemons. It returns the locked
// frequency in kHz. A phone without su is an error (the caller falls back
// to fixed performance mode).
func LockClocks(ctx context.Context, c *Client, serial string) (int64, error) {
	script := `set -e; mkdir -p ` + RemoteDir + `; : > ` + savedClocks + `.tmp; best=; bmax=0; ` +
		`for d in /sys/devices/system/cpu/cpufreq/policy*; do ` +
		`echo "$d $(cat $d/scaling_governor) $(cat $d/scaling_min_freq) $(cat $d/scaling_max_freq)" >> ` + savedClocks + `.tmp; ` +
		`m=$(cat $d/cpuinfo_max_freq); if [ "$m" -gt "$bmax" ]; then bmax=$m; best=$d; fi; done; ` +
		`mv ` + savedClocks + `.tmp ` + savedClocks + `; ` +
		`t=$bmax; for f in $(cat $best/scaling_available_frequencies 2>/dev/null || echo $bmax); do ` +
		`if [ $((f*2)) -ge "$bmax" ] && [ "$f" -lt "$t" ]; then t=$f; fi; done; ` +
		`for s in ` + thermalDaemons + `; do stop $s 2>/dev/null || true; done; ` +
		`echo userspace > $best/scaling_governor; echo $t > $best/scaling_max_freq; echo $t > $best/scaling_min_freq; ` +
		`echo $t > $best/scaling_setspeed 2>/dev/null || true; echo locked $t`
	out, err := c.Shell(ctx, serial, "su -c "+ShellQuote(script))
	if err != nil {
		return 0, fmt.Errorf("phone %s: locking clocks (needs root): %w", serial, err)
	}
	f := strings.Fields(string(out))
	if len(f) < 2 || f[len(f)-2] != "locked" {
		return 0, fmt.Errorf("phone %s: locking clocks printed %q", serial, clip(string(out), 120))
	}
	khz, err := strconv.ParseInt(f[len(f)-1], 10, 64)
	if err != nil || khz <= 0 {
		return 0, fmt.Errorf("phone %s: locked at %q", serial, f[len(f)-1])
	}
	return khz, nil
}

// RestoreClocks puts back what LockClocks saved (governors and limits of
// every policy; the daemons are started again) and removes the record.
// It does nothing when nothing was saved, so the agent calls it on every
// phone it attaches: clocks a crashed agent left locked are restored.
func RestoreClocks(ctx context.Context, c *Client, serial string) (restored bool, err error) {
	script := `[ -f ` + savedClocks + ` ] || { echo none; exit 0; }; ` +
		`while read d g lo hi; do echo $lo > $d/scaling_min_freq; echo $hi > $d/scaling_max_freq; echo $hi > $d/scaling_max_freq; echo $lo > $d/scaling_min_freq; echo $g > $d/scaling_governor; done < ` + savedClocks + `; ` +
		`for s in ` + thermalDaemons + `; do start $s 2>/dev/null || true; done; rm -f ` + savedClocks + `; echo restored`
	out, err := c.Shell(ctx, serial, "if [ -f "+savedClocks+" ]; then su -c "+ShellQuote(script)+"; else echo none; fi")
	if err != nil {
		return false, fmt.Errorf("phone %s: restoring clocks: %w", serial, err)
	}
	return strings.Contains(string(out), "restored"), nil
}

// DropCaches drops a rooted phone's whole page cache: sync, then echo 3 >
// /proc/sys/vm/drop_caches as root, so that the next reads of any file
// come from flash. A phone without su is an error.
func DropCaches(ctx context.Context, c *Client, serial string) error {
	out, err := c.Shell(ctx, serial, "su -c "+ShellQuote("sync; echo 3 > /proc/sys/vm/drop_caches && echo dropped")+" 2>&1")
	if err != nil {
		return fmt.Errorf("phone %s: dropping the page cache (needs root): %w", serial, err)
	}
	if !strings.Contains(string(out), "dropped") {
		return fmt.Errorf("phone %s: dropping the page cache (needs root): %s", serial, clip(strings.TrimSpace(string(out)), 120))
	}
	return nil
}

// RefBench runs the reference microbenchmark on the phone: a fixed shell
// loop of iters iterations timed by the phone's own clock, so that the
// adb round trip is not in it. It returns the loop's duration.
func RefBench(ctx context.Context, c *Client, serial string, iters int) (time.Duration, error) {
	out, err := c.Shell(ctx, serial, refScript(iters))
	if err != nil {
		return 0, err
	}
	return parseRef(string(out))
}
