package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/url"
	"regexp"
	"strings"
	"time"

	"github.com/lesfarm/lesfarm/coordinator/api"
	"github.com/lesfarm/lesfarm/coordinator/api/client"
	"github.com/lesfarm/lesfarm/jobs"
)

// demoGateRounds and demoBisectRounds bound the demo's A/B gate and each
// bisection step. The decode rate is timed on the emulated phone's device
// clock and barely varies, so a few rounds separate the builds (a real
// phone's CV needs the defaults).
const (
	demoGateRounds   = 5
	demoBisectRounds = 3
)

// gateAndBisect is the demo's last act (issue 30 item 5): the planted
// build gated against the one before it with the A/B gate, as CI runs
// `lesfarm run --baseline`, which fails; then the alert bisected across
// all the demo's builds, as `lesfarm bisect --wait` does, to the culprit.
// Both run on one phone (the last profile), and neither feeds the series.
func (d *demoFarm) gateAndBisect(ctx context.Context, lineage string) error {
	o := d.o
	if o.regressBuild < 2 || o.builds < o.regressBuild {
		return nil // nothing planted, or nothing good before it
	}
	ph := d.phones[len(d.phones)-1]
	model := "emulated:" + ph.profile
	name := func(n int) string { return fmt.Sprintf("%s-b%d", lineage, n) }
	build, base := name(o.regressBuild), name(o.regressBuild-1)
	d.say("gating build b%d with the A/B gate, as CI would: lesfarm run --suite %s --build %s --baseline %s --wait (lookahead rung, on %s, up to %d rounds)",
		o.regressBuild, demoSuite, build, base, ph.name, demoGateRounds)
	out := &indent{w: d.env.Stdout, skip: runProgress.MatchString}
	req := &client.TriggerRequest{Suite: demoSuite, Build: build, Lineage: lineage,
		Devices: &jobs.Selector{Labels: d.labels(), DeviceModel: model}, Override: json.RawMessage(`{"modes":["lookahead"],"warmup":0,"repetitions":1}`)}
	err := runAB(ctx, d.env, d.cl, req, &abOptions{baseline: base, maxRounds: demoGateRounds, wait: true, poll: 200 * time.Millisecond}, out)
	var exit *ExitError
	switch {
	case errors.As(err, &exit) && exit.Code == 1:
		d.say("the gate failed (exit 1): build b%d is slower than b%d, so CI would stop it before it merges", o.regressBuild, o.regressBuild-1)
	case err != nil:
		return fmt.Errorf("demo: A/B gate: %w", err)
	default:
		d.say("the gate passed (exit 0): it did not catch the planted change")
	}

	gid, alertID, err := d.alertOn(ctx, lineage, model)
	if err != nil || gid == 0 {
		return err
	}
	first, last := name(1), name(o.builds)
	d.say("bisecting alert #%d across the %d builds, as lesfarm bisect %d --wait --last-good %s --first-bad %s does (on %s, at most %d rounds a step)",
		gid, o.builds, gid, first, last, model, demoBisectRounds)
	bo := &bisectOptions{req: client.BisectRequest{AlertID: alertID, LastGood: first, FirstBad: last, MaxRounds: demoBisectRounds, Budget: "1h"},
		wait: true, poll: 200 * time.Millisecond}
	b, err := runBisect(ctx, d.cl, gid, bo, out)
	if err != nil {
		return fmt.Errorf("demo: bisect: %w", err)
	}
	if b.State != "culprit" || b.Culprit == nil {
		d.say("the bisection ended %s: %s", strings.ReplaceAll(b.State, "_", " "), b.Reason)
		return nil
	}
	c := b.Culprit
	d.say("the bisection named the culprit: build %s (first bad, %s), after %s (last good), in %d steps and %s of device time",
		strings.TrimPrefix(c.FirstBad.ID, lineage+"-"), c.FirstBad.ID, strings.TrimPrefix(c.LastGood.ID, lineage+"-"), decidedSteps(b),
		time.Duration(b.DeviceSeconds*float64(time.Second)).Round(100*time.Millisecond))
	if c.FirstBad.GitSHA != "" && c.FirstBad.GitSHA == c.LastGood.GitSHA {
		fmt.Fprintf(d.env.Stdout, "    both builds come from commit %s (the demo plants the change with -ldflags, not a commit), so %s is empty here;\n"+
			"    on builds pushed per commit it lists the commits to read\n", shortHash(c.FirstBad.GitSHA), c.GitLog)
	}
	return nil
}

func decidedSteps(b *client.Bisection) int {
	n := 0
	for _, s := range b.Steps {
		if s.State == "done" {
			n++
		}
	}
	return n
}

func shortHash(sha string) string {
	if len(sha) > 12 {
		return sha[:12]
	}
	return sha
}

// alertOn returns the demo's regression alert group at the planted build
// and its decode alert on model (0 when the detector raised none).
func (d *demoFarm) alertOn(ctx context.Context, lineage, model string) (int64, int64, error) {
	var list struct {
		Items []api.AlertGroup `json:"items"`
	}
	q := url.Values{"suite": {demoSuite}, "lineage": {lineage}, "regression": {"true"}, "limit": {"100"}}
	if err := getJSON(ctx, d.base+"/v1/alerts?"+q.Encode(), &list); err != nil {
		return 0, 0, fmt.Errorf("demo: list alerts: %w", err)
	}
	for _, it := range list.Items {
		var g api.AlertGroup
		if err := getJSON(ctx, fmt.Sprintf("%s/v1/alerts/%d", d.base, it.ID), &g); err != nil {
			return 0, 0, fmt.Errorf("demo: read alert group %d: %w", it.ID, err)
		}
		for _, a := range g.Alerts {
			if a.Series.DeviceModel == model && a.Series.Metric == "decode_tps" && a.Direction == "regression" {
				return g.ID, a.ID, nil
			}
		}
	}
	d.say("no decode regression alert on %s to bisect", model)
	return 0, 0, nil
}

// indent writes each whole line to w indented by four spaces, except the
// lines skip drops (nil: none).
type indent struct {
	w    io.Writer
	skip func(line string) bool
	buf  bytes.Buffer
}

func (i *indent) Write(p []byte) (int, error) {
	i.buf.Write(p)
	for {
		line, err := i.buf.ReadString('\n')
		if errors.Is(err, io.EOF) { // no newline yet: keep the rest
			i.buf.Reset()
			i.buf.WriteString(line)
			return len(p), nil
		}
		if i.skip != nil && i.skip(line) {
			continue
		}
		if _, err := io.WriteString(i.w, "    "+line); err != nil {
			return 0, err
		}
	}
}

// runProgress matches the A/B gate's per-run progress lines, which the
// demo leaves out (its verdict says what they add up to).
var runProgress = regexp.MustCompile(`^\d\d:\d\d:\d\d run \d+ `)
