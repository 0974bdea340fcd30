package cli

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/lesfarm/lesfarm/runtime/expert"
	"github.com/lesfarm/lesfarm/runtime/gguf"
	"github.com/lesfarm/lesfarm/runtime/model"
	"github.com/lesfarm/lesfarm/runtime/moe"
	"github.com/lesfarm/lesfarm/runtime/units"
)

func init() { register("replay", newReplayCmd) }

// replayLine is one policy's result in lesfarm replay's JSON output.
type replayLine struct {
	Policy      string  `json:"policy"`
	BudgetBytes int64   `json:"budget_bytes"`
	Demands     int64   `json:"demands"`
	Hits        int64   `json:"hits"`
	HitRate     float64 `json:"hit_rate"`
	Reads       int64   `json:"reads"`
	BytesRead   int64   `json:"bytes_read"`
	MINBytes    int64   `json:"min_bytes_read"`
	MINHitRate  float64 `json:"min_hit_rate"`
	// BytesVsMIN is BytesRead / MINBytes.
	BytesVsMIN float64 `json:"bytes_vs_min"`
}

func newReplayCmd(env *Env) *cobra.Command {
	var (
		tracePath, policies, budget, modelPath, format, horizons string
		repeat                                                   int
		precision                                                bool
	)
	cmd := &cobra.Command{
		Use:   "replay --trace FILE --policy P --budget B",
		Short: "Replay a recorded routing trace through a cache policy (cache only) and compare with Belady's MIN",
		Long: `Replay reads a routing trace recorded by bench --ladder --record-trace and
replays its demands through an expert cache of --budget bytes (or a fraction
of the model's expert bytes: 0.2, 20%) with each --policy, with no
prefetching and no timing: the cache's share of a run's bytes, in seconds.
For each policy it prints the demands, hits, hit rate, reads and bytes read,
and the same for Belady's MIN (the fewest bytes any policy can read), and the
ratio of the two. --repeat N replays the trace N times back to back, as the
ladder repeats one prompt. --model M checks that the trace was recorded from
a model with M's layers, experts and expert sizes. Policies: ` + strings.Join(expert.PolicyNames(), ", ") + ` (comma-separated, or all).`,
		Example: `  lesfarm bench --model phone.gguf --ladder --profile phone-flagship --expert-budget 0.2 --record-trace phone.trace.gz
  lesfarm replay --trace phone.trace.gz --policy lfu,nextuse --budget 20%`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if tracePath == "" {
				return usagef("--trace FILE is required (record one with bench --ladder --record-trace FILE)")
			}
			if budget == "" {
				return usagef("--budget is required: bytes (e.g. 512MiB) or a fraction of the expert bytes (e.g. 0.2)")
			}
			if repeat < 1 {
				return usagef("--repeat must be at least 1")
			}
			if format != "text" && format != "json" {
				return usagef("--format %q is not supported: use text or json", format)
			}
			names := expert.PolicyNames()
			if policies != "all" {
				names = nil
				for _, p := range strings.Split(policies, ",") {
					p = strings.TrimSpace(p)
					if _, err := expert.NewPolicy(p); err != nil {
						return usagef("--policy: %v", err)
					}
					names = append(names, p)
				}
			}
			pb, err := units.ParseBudget(budget)
			if err != nil {
				return usagef("--budget: %v", err)
			}
			tf, err := expert.ReadTraceFile(tracePath)
			if err != nil {
				if errors.Is(err, fs.ErrNotExist) {
					return usagef("trace %s does not exist", tracePath)
				}
				return usagef("%v", err)
			}
			if modelPath != "" {
				m, err := modelTraceInfo(modelPath)
				if err != nil {
					return err
				}
				if err := tf.Model.Match(m); err != nil {
					return usagef("%v", err)
				}
			}
			b := pb.Resolve(tf.Model.TotalExpertBytes())
			sizes := make([]int64, len(tf.Model.Layers))
			for l := range sizes {
				sizes[l] = tf.Model.ExpertBytes(l)
			}
			tr := tf.Trace.Repeat(repeat)
			min, err := expert.ReplayMIN(tr, sizes, b)
			if err != nil {
				return usagef("--budget: %v", err)
			}
			var lines []replayLine
			for _, name := range names {
				p, _ := expert.NewPolicy(name)
				r, err := expert.ReplayCache(tr, sizes, p, b)
				if err != nil {
					return usagef("--budget: %v", err)
				}
				lines = append(lines, replayLine{Policy: name, BudgetBytes: b, Demands: r.Demands, Hits: r.Hits, HitRate: r.HitRate(), Reads: r.Reads, BytesRead: r.BytesRead,
					MINBytes: min.BytesRead, MINHitRate: min.HitRate(), BytesVsMIN: float64(r.BytesRead) / float64(max(min.BytesRead, 1))})
			}
			if horizons != "" {
				for _, h := range strings.Split(horizons, ",") {
					n, err := strconv.Atoi(strings.TrimSpace(h))
					if err != nil || n < 0 {
						return usagef("--horizon: %q is not a number of calls >= 0", h)
					}
					o := expert.NewHorizonOracle(tr, n)
					r, err := expert.ReplayCache(tr, sizes, o, b)
					if err != nil {
						return usagef("--budget: %v", err)
					}
					lines = append(lines, replayLine{Policy: o.Name(), BudgetBytes: b, Demands: r.Demands, Hits: r.Hits, HitRate: r.HitRate(), Reads: r.Reads, BytesRead: r.BytesRead,
						MINBytes: min.BytesRead, MINHitRate: min.HitRate(), BytesVsMIN: float64(r.BytesRead) / float64(max(min.BytesRead, 1))})
				}
			}
			if format == "json" {
				enc := json.NewEncoder(env.Stdout)
				for _, l := range lines {
					if err := enc.Encode(l); err != nil {
						return err
					}
				}
				return nil
			}
			fmt.Fprintf(env.Stdout, "trace %s: %s, %d calls, %d demands (×%d); budget %s (%.1f%% of %s experts)\n", tracePath, tf.Model, len(tf.Trace.Calls), tr.Len(), repeat,
				mib(b), 100*float64(b)/float64(max(tf.Model.TotalExpertBytes(), 1)), mib(tf.Model.TotalExpertBytes()))
			tw := tabwriter.NewWriter(env.Stdout, 0, 0, 2, ' ', tabwriter.AlignRight)
			fmt.Fprintln(tw, "policy\thits\thit rate\treads\tMB read\t× MIN bytes\t")
			for _, l := range lines {
				fmt.Fprintf(tw, "%s\t%d\t%.3f\t%d\t%.1f\t%.2f\t\n", l.Policy, l.Hits, l.HitRate, l.Reads, float64(l.BytesRead)/1e6, l.BytesVsMIN)
			}
			fmt.Fprintf(tw, "min (Belady)\t%d\t%.3f\t%d\t%.1f\t1.00\t\n", min.Hits, min.HitRate(), min.Reads, float64(min.BytesRead)/1e6)
			if err := tw.Flush(); err != nil {
				return err
			}
			if precision {
				printRankPrecision(env, tf)
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&tracePath, "trace", "", "routing trace file (bench --ladder --record-trace)")
	f.StringVar(&policies, "policy", "lfu", "cache policies, comma-separated, or all: "+strings.Join(expert.PolicyNames(), ", "))
	f.StringVar(&budget, "budget", "", "expert budget: bytes (512MiB) or a fraction of the expert bytes (0.2, 20%)")
	f.StringVar(&modelPath, "model", "", "check that the trace was recorded from this model's geometry")
	f.StringVar(&horizons, "horizon", "", "also print the bound of a predictor that sees this many calls (layers) ahead, comma-separated: Belady within the horizon, true popularity beyond it (0 = popularity only)")
	f.BoolVar(&precision, "precision", false, "also print the recorded lookahead predictor's precision per rank (mean, worst and best layer)")
	f.IntVar(&repeat, "repeat", 1, "replay the trace this many times back to back")
	f.StringVar(&format, "format", "text", "output: text or json (one object per policy)")
	return cmd
}

// printRankPrecision prints the precision of each rank of the trace's
// one-token predictions: over all layers, and the worst and best layer.
func printRankPrecision(env *Env, tf *expert.TraceFile) {
	hits, seen := tf.Trace.RankPrecision(len(tf.Model.Layers), max(tf.Model.ExpertsUsed, 1))
	ranks := 0
	for _, s := range seen {
		ranks = max(ranks, len(s))
	}
	if ranks == 0 {
		fmt.Fprintln(env.Stdout, "\nno ranked predictions in the trace (record it in a lookahead mode)")
		return
	}
	fmt.Fprintln(env.Stdout, "\nlookahead predictor, precision per rank (all layers; worst and best layer):")
	for r := range ranks {
		var h, n int64
		worst, best := 2.0, -1.0
		wl, bl := 0, 0
		for l := range seen {
			if r >= len(seen[l]) || seen[l][r] == 0 {
				continue
			}
			h += hits[l][r]
			n += seen[l][r]
			p := float64(hits[l][r]) / float64(seen[l][r])
			if p < worst {
				worst, wl = p, l
			}
			if p > best {
				best, bl = p, l
			}
		}
		fmt.Fprintf(env.Stdout, "  rank %d: %.3f (layer %d %.3f, layer %d %.3f; %d predictions)\n", r+1, float64(h)/float64(max(n, 1)), wl, worst, bl, best, n)
	}
}

func mib(n int64) string { return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20)) }

// errShapesOnly stops a model load once the expert shapes are known.
var errShapesOnly = errors.New("shapes read")

// modelTraceInfo returns the TraceModel of the model at path.
func modelTraceInfo(path string) (expert.TraceModel, error) {
	if _, err := os.Stat(path); err != nil {
		return expert.TraceModel{}, usagef("--model %s: %v", path, err)
	}
	var tm expert.TraceModel
	m, err := model.Load(path, model.Options{Threads: 1, Experts: func(f *gguf.File, shapes []moe.LayerShape) (moe.Source, error) {
		tm = expert.TraceModelOf(f, shapes)
		return nil, errShapesOnly
	}})
	if !errors.Is(err, errShapesOnly) {
		if err == nil {
			m.Close()
			return tm, usagef("--model %s is not a Mixture-of-Experts model", path)
		}
		return tm, usagef("--model %s: %v", path, err)
	}
	return tm, nil
}
