package cli

import (
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"

	"github.com/lesfarm/lesfarm/profile"
	"github.com/lesfarm/lesfarm/runtime/bench"
	"github.com/lesfarm/lesfarm/runtime/expert"
)

// runTwinCheck is bench --ladder --storage direct --twin-check PROFILE:
// every mode on direct storage and on the twin, interleaved, compared per
// row (bench.RunTwinCheck).
func runTwinCheck(env *Env, lf *ladderFlags, lc bench.LadderConfig, format string) error {
	switch {
	case !lc.Direct:
		return usagef("--twin-check compares the real disk with its twin: give --storage direct")
	case lf.replay != 0 || lf.mixed != "" || lf.record != "":
		return usagef("--twin-check runs the expert modes only: drop --replay-compute, --mixed and --record-trace")
	case lf.timeBase != "":
		return usagef("--twin-check chooses the time base itself (device time when the twin has a compute section): drop --time")
	case !slices.Contains(bench.TwinFormats, format):
		return usagef("--twin-check writes --format %s", strings.Join(bench.TwinFormats, " or "))
	}
	twin, err := profile.Load(lf.twin)
	if err != nil {
		return usagef("--twin-check: %v", err)
	}
	before := loadAverage()
	rep, err := bench.RunTwinCheck(env.Ctx, lc, twin)
	if err != nil {
		if errors.Is(err, expert.ErrBudgetTooSmall) {
			return usagef("--expert-budget: %v", err)
		}
		if env.Ctx.Err() != nil {
			return fmt.Errorf("bench: interrupted")
		}
		return err
	}
	if after := loadAverage(); after != "" && before != "" {
		rep.Load = []string{before, after}
	}
	return rep.Write(env.Stdout, format)
}

// loadAverage is the host's 1-minute load average, or "" where unknown.
func loadAverage() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return ""
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return ""
	}
	return f[0]
}
