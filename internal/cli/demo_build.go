package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/lesfarm/lesfarm/coordinator/api"
	"github.com/lesfarm/lesfarm/coordinator/api/client"
	"github.com/lesfarm/lesfarm/coordinator/store"
	"github.com/lesfarm/lesfarm/jobs"
)

// demoBuild is one build the demo ran on every phone.
type demoBuild struct {
	n       int
	name    string
	runIDs  []int64
	elapsed time.Duration
}

// runBuild triggers the demo suite for build n on every phone, follows the
// runs and waits until the regression detector has seen each result.
func (d *demoFarm) runBuild(ctx context.Context, lineage string, n int) (demoBuild, error) {
	t0 := time.Now()
	name := fmt.Sprintf("%s-b%d", lineage, n)
	d.say("build %d/%d: %s", n, d.o.builds, name)
	set, err := d.cl.TriggerRuns(ctx, &client.TriggerRequest{Suite: demoSuite, Build: name, Lineage: lineage,
		Devices: &jobs.Selector{Labels: d.labels()}, Fanout: true})
	if err != nil {
		return demoBuild{}, fmt.Errorf("demo: trigger build %s: %w", name, err)
	}
	fmt.Fprintf(d.env.Stdout, "    %d runs queued, one per phone; the phones share this host's CPUs, so they run one at a time\n", len(set.Trigger.RunIDs))
	started, waits := map[int64]time.Time{}, map[int64]string{}
	done, err := d.cl.FollowTrigger(ctx, set.Trigger.ID, func(ev client.RunEvent) {
		switch {
		case ev.State == string(store.RunQueued):
			// Busy devices are the normal wait here; say only why a run
			// could not run at all.
			if ev.WaitingReason != "" && !strings.HasPrefix(ev.WaitingReason, "waiting for a free device") && waits[ev.RunID] != ev.WaitingReason {
				waits[ev.RunID] = ev.WaitingReason
				fmt.Fprintf(d.env.Stdout, "    %s\n", demoProgressLine(ev.RunID, "", ev.WaitingReason))
			}
		case !store.TerminalState(ev.State):
			if _, ok := started[ev.RunID]; !ok {
				started[ev.RunID] = time.Now()
			}
		default:
			msg := ev.State
			if t, ok := started[ev.RunID]; ok {
				msg += fmt.Sprintf(" in %.1f s", time.Since(t).Seconds())
			}
			if ev.Error != "" {
				msg += " (" + ev.Error + ")"
			}
			fmt.Fprintf(d.env.Stdout, "    %s\n", demoProgressLine(ev.RunID, ev.DeviceID, msg))
		}
	})
	if err != nil {
		return demoBuild{}, fmt.Errorf("demo: waiting for build %s: %w", name, err)
	}
	if !done.Succeeded {
		return demoBuild{}, fmt.Errorf("demo: not every run of build %s succeeded: %v", name, done.States)
	}
	// Results are committed before the detector sees them: wait for it,
	// so the alerts printed at the end are complete.
	want := map[int64]bool{}
	for _, id := range set.Trigger.RunIDs {
		want[id] = true
	}
	for len(want) > 0 {
		select {
		case id := <-d.observed:
			delete(want, id)
		case <-ctx.Done():
			return demoBuild{}, fmt.Errorf("demo: waiting for the detector on build %s: %w", name, ctx.Err())
		}
	}
	b := demoBuild{n: n, name: name, runIDs: set.Trigger.RunIDs, elapsed: time.Since(t0)}
	fmt.Fprintf(d.env.Stdout, "    build %d: %d runs in %.1f s, one at a time\n", n, len(b.runIDs), b.elapsed.Seconds())
	return b, nil
}

// printLadders prints, per phone, the decode rate of each rung of the
// ladder at every build, with the speed-up over on-demand, hit rate,
// predictor recall and stall share of the first and the last build.
func (d *demoFarm) printLadders(ctx context.Context, builds []demoBuild) error {
	type cell struct {
		index       int
		tps         []float64 // per build; 0 when missing
		first, last *api.Result
	}
	devices := map[string]map[string]*cell{}
	models := map[string]string{}
	for bi, b := range builds {
		for _, id := range b.runIDs {
			var run api.RunDetail
			if err := getJSON(ctx, fmt.Sprintf("%s/v1/runs/%d", d.base, id), &run); err != nil {
				return fmt.Errorf("demo: read run %d: %w", id, err)
			}
			cfgs := devices[run.DeviceID]
			if cfgs == nil {
				cfgs = map[string]*cell{}
				devices[run.DeviceID] = cfgs
			}
			for _, r := range run.Results {
				c := cfgs[r.ConfigKey]
				if c == nil {
					c = &cell{index: r.ConfigIndex, tps: make([]float64, len(builds))}
					cfgs[r.ConfigKey] = c
				}
				models[run.DeviceID] = r.DeviceModel
				if r.Valid && r.Error == "" {
					c.tps[bi] = r.DecodeTPS.Mean
				}
				if c.first == nil {
					c.first = &r
				}
				c.last = &r
			}
		}
	}
	first, last := builds[0].n, builds[len(builds)-1].n
	d.say("the LES ladder per phone: decode tok/s on the profile's device clock (mean of 3 repetitions after a warm-up), build by build;")
	d.say("the right-hand columns compare the first build with the last (b%d → b%d)", first, last)
	names := make([]string, 0, len(devices))
	for n := range devices {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, dev := range names {
		fmt.Fprintf(d.env.Stdout, "\n  %s (%s)\n", dev, models[dev])
		tw := tabwriter.NewWriter(d.env.Stdout, 0, 4, 2, ' ', tabwriter.AlignRight)
		head := "  config\t"
		for _, b := range builds {
			head += fmt.Sprintf("b%d\t", b.n)
		}
		fmt.Fprintln(tw, head+"× on-demand\thit rate\trecall\tstall\t")
		keys := make([]string, 0, len(devices[dev]))
		for k := range devices[dev] {
			keys = append(keys, k)
		}
		sort.Slice(keys, func(i, j int) bool { return devices[dev][keys[i]].index < devices[dev][keys[j]].index })
		var base0, base1 float64
		for _, k := range keys {
			c := devices[dev][k]
			row := "  " + k + "\t"
			for _, v := range c.tps {
				row += fmt.Sprintf("%.1f\t", v)
			}
			tps0, tps1 := c.tps[0], c.tps[len(c.tps)-1]
			if strings.HasPrefix(k, string(jobs.ModeOnDemand)+"/") {
				base0, base1 = tps0, tps1
			}
			speed := ""
			if base0 > 0 && base1 > 0 && tps0 > 0 && tps1 > 0 {
				speed = fmt.Sprintf("%.2f→%.2f×", tps0/base0, tps1/base1)
			}
			fmt.Fprintf(tw, "%s%s\t%s\t%s\t%s\t\n", row, speed, pctPair(c.first.HitRate, c.last.HitRate),
				recallPair(c.first.Recall, c.last.Recall), pctPair(c.first.StallFraction, c.last.StallFraction))
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	fmt.Fprintln(d.env.Stdout)
	return nil
}

// printAlerts prints the alert groups of the lineage with their alerts and
// returns how many groups there are.
func (d *demoFarm) printAlerts(ctx context.Context, lineage string) (int, error) {
	var list struct {
		Items []api.AlertGroup `json:"items"`
	}
	q := url.Values{"suite": {demoSuite}, "lineage": {lineage}, "limit": {"100"}}
	if err := getJSON(ctx, d.base+"/v1/alerts?"+q.Encode(), &list); err != nil {
		return 0, fmt.Errorf("demo: list alerts: %w", err)
	}
	if len(list.Items) == 0 {
		d.say("the detector raised no alert on lineage %s", lineage)
		return 0, nil
	}
	d.say("the detector raised %d alert group(s) on lineage %s:", len(list.Items), lineage)
	for _, it := range list.Items {
		var g api.AlertGroup
		if err := getJSON(ctx, fmt.Sprintf("%s/v1/alerts/%d", d.base, it.ID), &g); err != nil {
			return 0, fmt.Errorf("demo: read alert group %d: %w", it.ID, err)
		}
		d.printAlertGroup(&g, lineage)
	}
	return len(list.Items), nil
}

// pctPair formats a fraction at the first and the last build as
// percentages, "42%→40%", or one figure when they agree to the percent.
func pctPair(a, b float64) string {
	pa, pb := fmt.Sprintf("%.0f%%", 100*a), fmt.Sprintf("%.0f%%", 100*b)
	if pa == pb {
		return pa
	}
	return pa + "→" + pb
}

// printAlertGroup prints one alert group in builds and human units: the
// build it starts at (with the last one before it), where it holds, then
// one line per alert naming the config, the device, the decode rates
// before and after, and the LES metrics that moved with it.
func (d *demoFarm) printAlertGroup(g *api.AlertGroup, lineage string) {
	out := d.env.Stdout
	kind := "improvement"
	if g.Regression {
		kind = "regression"
	}
	short := strings.TrimPrefix(g.Build, lineage+"-")
	where := g.ScopeDetail
	if g.Scope == "global" {
		where = "on every device model: " + g.ScopeDetail
	}
	fmt.Fprintf(out, "  #%d %s at build %s (%s), %s; status %s\n", g.ID, kind, short, g.Build, where, g.Status)
	for _, a := range g.Alerts {
		name, unit := strings.TrimSuffix(a.Series.Metric, "_tps"), ""
		switch a.Series.Metric {
		case "decode_tps", "prefill_tps":
			unit = " tok/s"
		case "ttft_ms":
			name, unit = "TTFT", " ms"
		}
		change := ""
		if a.BeforeMean > 0 {
			change = fmt.Sprintf(" (%+.0f%%)", 100*float64(a.RelativeChange))
		}
		fmt.Fprintf(out, "    - %s %s on %s: %.1f → %.1f%s%s%s\n", a.Series.Config, name,
			a.Series.DeviceModel, a.BeforeMean, a.AfterMean, unit, change, alertRange(&a))
		if moved := movedMetrics(a.Attribution); moved != "" {
			fmt.Fprintf(out, "      moved with it: %s\n", moved)
		}
	}
	if g.Regression && d.o.regressBuild > 0 && short == fmt.Sprintf("b%d", d.o.regressBuild) {
		fmt.Fprintf(out, "    why (the planted change): from b%d the builds run the executable linked with lookahead off; it prefetches nothing,\n"+
			"    so it reads fewer bytes per token and evicts less (hit rate up), but decode now waits for every expert it misses,\n"+
			"    and so does the prompt's prefill (the device-timed prefill and TTFT of the same rungs)\n", d.o.regressBuild)
	}
}

// movedMetrics renders an alert's attribution (the LES metrics that moved
// with it) in human units: fractions as percentages, bytes in MB.
func movedMetrics(raw json.RawMessage) string {
	var full []struct {
		Metric string  `json:"metric"`
		Layers string  `json:"layers"`
		Before float64 `json:"before"`
		After  float64 `json:"after"`
	}
	if json.Unmarshal(raw, &full) != nil {
		return ""
	}
	parts := make([]string, 0, len(full))
	for _, m := range full {
		name := strings.ReplaceAll(m.Metric, "_", " ")
		var v string
		switch {
		case strings.Contains(m.Metric, "bytes"):
			v = fmt.Sprintf("%.2f MB → %.2f MB", m.Before/1e6, m.After/1e6)
		case strings.Contains(m.Metric, "rate") || strings.Contains(m.Metric, "fraction") || strings.Contains(m.Metric, "recall"):
			v = fmt.Sprintf("%.0f%% → %.0f%%", 100*m.Before, 100*m.After)
		default:
			v = fmt.Sprintf("%.3g → %.3g", m.Before, m.After)
		}
		if m.Layers != "" {
			name += " (layers " + m.Layers + ")"
		}
		parts = append(parts, name+" "+v)
	}
	return strings.Join(parts, ", ")
}

// recallPair is pctPair for predictor recall, "—" when neither build made
// a prediction (the rungs without lookahead).
func recallPair(a, b float64) string {
	if a == 0 && b == 0 {
		return "—"
	}
	return pctPair(a, b)
}
