package cli

import (
	"context"
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
	last := map[int64]string{}
	done, err := d.cl.FollowTrigger(ctx, set.Trigger.ID, func(ev client.RunEvent) {
		if ev.State == string(store.RunAssigned) {
			return // running follows at once
		}
		msg := ev.State
		if ev.Error != "" {
			msg += " (" + ev.Error + ")"
		}
		if last[ev.RunID] != msg {
			last[ev.RunID] = msg
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
// ladder at every build, with the last build's speed-up over on-demand,
// hit rate, predictor recall and stall share.
func (d *demoFarm) printLadders(ctx context.Context, builds []demoBuild) error {
	type cell struct {
		index int
		tps   []float64 // per build; 0 when missing
		last  api.Result
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
				c.last = r
			}
		}
	}
	d.say("the LES ladder per phone: decode tok/s on the profile's device clock (mean of 3 repetitions after a warm-up), build by build")
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
		var base float64
		for _, k := range keys {
			c := devices[dev][k]
			row := "  " + k + "\t"
			for _, v := range c.tps {
				row += fmt.Sprintf("%.1f\t", v)
			}
			lastTPS := c.tps[len(c.tps)-1]
			if strings.HasPrefix(k, string(jobs.ModeOnDemand)+"/") {
				base = lastTPS
			}
			speed := ""
			if base > 0 && lastTPS > 0 {
				speed = fmt.Sprintf("%.2f×", lastTPS/base)
			}
			fmt.Fprintf(tw, "%s%s\t%.3f\t%.3f\t%.3f\t\n", row, speed, c.last.HitRate, c.last.Recall, c.last.StallFraction)
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
		kind := "improvement"
		if g.Regression {
			kind = "regression"
		}
		fmt.Fprintf(d.env.Stdout, "  #%d %s, scope %s (%s), at build %s, status %s\n", g.ID, kind, g.Scope, g.ScopeDetail, g.Build, g.Status)
		fmt.Fprintf(d.env.Stdout, "    %s\n", g.Summary)
		for _, a := range g.Alerts {
			fmt.Fprintf(d.env.Stdout, "    - %s\n", a.Summary)
		}
	}
	return len(list.Items), nil
}
