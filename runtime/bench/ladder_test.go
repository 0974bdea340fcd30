package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/lesfarm/lesfarm/internal/fixture"
	"github.com/lesfarm/lesfarm/profile"

	"github.com/lesfarm/lesfarm/runtime/expert"
	"github.com/lesfarm/lesfarm/runtime/units"
)

func ladderFixture(t *testing.T, rel string) string {
	t.Helper()
	p := filepath.Join(fixture.SharedDir(), rel)
	if _, err := os.Stat(p); err != nil {
		fixture.Missing(t, p, err, "the LES ladder on this fixture")
	}
	return p
}

func TestLadderReport(t *testing.T) {
	path := ladderFixture(t, "trained/tiny-moe-kjv-f16.gguf")
	prof, err := profile.Load("laptop-nvme")
	if err != nil {
		t.Fatal(err)
	}
	rep, err := RunLadder(context.Background(), LadderConfig{Model: path, Profile: prof, Budget: units.Budget{Fraction: 0.25}, Repetitions: 1, Warmup: 1, PromptTokens: 4, GenTokens: 8})
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Rows) != len(expert.Modes())+1 || rep.Oracle == nil || rep.Profile != "laptop-nvme" || rep.TimeBase != "" {
		t.Fatalf("report %+v", rep)
	}
	if want := int64(0.25 * float64(rep.ExpertBytes)); rep.BudgetBytes != want {
		t.Fatalf("budget %d, want %d", rep.BudgetBytes, want)
	}
	modes := append(expert.Modes(), -1)
	for i, row := range rep.Rows {
		want := SpeculativeRow
		if modes[i] >= 0 {
			want = modes[i].String()
		}
		if row.Mode != want || !row.IdenticalOutput || row.DecodeTokensPerSecond <= 0 {
			t.Fatalf("row %+v", row)
		}
		if i > 0 && math.Abs(row.SpeedupVsPrevious-row.DecodeTokensPerSecond/rep.Rows[i-1].DecodeTokensPerSecond) > 1e-9 {
			t.Fatalf("row %s: speedup over the row before %v", row.Mode, row.SpeedupVsPrevious)
		}
		if (row.Speculative != nil) != (row.Mode == SpeculativeRow) {
			t.Fatalf("row %s: speculative telemetry %+v", row.Mode, row.Speculative)
		}
		if row.HitRate < 0 || row.HitRate > 1 || row.StallFraction < 0 || row.StallFraction > 1 || row.BytesReadPerToken <= 0 {
			t.Fatalf("row %s out of range: %+v", row.Mode, row)
		}
		if row.PeakRSSBytes <= 0 && runtime.GOOS == "linux" {
			t.Fatalf("row %s: no peak RSS", row.Mode)
		}
		spec := row.Mode == "lookahead" || row.Mode == "scheduled" || row.Mode == SpeculativeRow
		if spec != (row.PredictorRecall > 0) {
			t.Fatalf("row %s: predictor recall %v", row.Mode, row.PredictorRecall)
		}
	}
	if r := rep.Rows[1]; r.SpeedupVsOnDemand != 1 || r.Mode != "on-demand" || rep.Rows[0].SpeedupVsNaive != 1 {
		t.Fatalf("on-demand speedup over itself = %v", r.SpeedupVsOnDemand)
	}
	if !rep.Oracle.IdenticalOutput || rep.Oracle.HitRate < rep.Rows[1].HitRate {
		t.Fatalf("oracle %+v", rep.Oracle)
	}

	// The JSON shape of issue 4, exactly.
	var buf bytes.Buffer
	if err := rep.Write(&buf, "json"); err != nil {
		t.Fatal(err)
	}
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(buf.Bytes(), &obj); err != nil {
		t.Fatal(err)
	}
	if got := keys(obj); got != "budget_bytes,model,oracle,profile,reference,rows" {
		t.Fatalf("top-level keys %s", got)
	}
	var rows []map[string]json.RawMessage
	json.Unmarshal(obj["rows"], &rows)
	if got := keys(rows[0]); got != "bytes_read_per_token,bytes_vs_oracle,cv,decode_tokens_per_second,hit_rate,identical_output,mode,oracle_fraction,peak_rss_bytes,predictor_precision,predictor_recall,repetitions,speedup_vs_naive,speedup_vs_on_demand,speedup_vs_on_demand_parallel,stall_fraction,stddev" {
		t.Fatalf("row keys %s", got)
	}
	var sp map[string]json.RawMessage
	json.Unmarshal(rows[len(rows)-1]["speculative"], &sp)
	if got := keys(sp); got != "acceptance_rate,adaptive,cut_share,cut_verify,drafter,experts_per_verify,k,mean_accepted,off_share,paired_max,paired_min,paired_speedup,tokens_per_target_pass,verify_us" {
		t.Fatalf("speculative keys %s", got)
	}
	if s := rep.Rows[len(rep.Rows)-1].Speculative; s.PairedSpeedup <= 0 || s.PairedMin > s.PairedSpeedup || s.PairedMax < s.PairedSpeedup {
		t.Fatalf("paired speedup %v (%v–%v)", s.PairedSpeedup, s.PairedMin, s.PairedMax)
	}
	for _, r := range rep.Rows {
		if want := r.BytesReadPerToken / rep.Oracle.BytesReadPerToken; r.BytesVsOracle != want || want <= 0 {
			t.Fatalf("%s: bytes_vs_oracle %v, want %v", r.Mode, r.BytesVsOracle, want)
		}
	}
	var oracle map[string]json.RawMessage
	json.Unmarshal(obj["oracle"], &oracle)
	if _, ok := oracle["decode_tokens_per_second"]; !ok {
		t.Fatal("oracle lacks decode_tokens_per_second")
	}
	for _, f := range []string{"md", "csv", "jsonl"} {
		buf.Reset()
		if err := rep.Write(&buf, f); err != nil {
			t.Fatal(err)
		}
		if n := strings.Count(buf.String(), "\n"); n < 6 || !strings.Contains(buf.String(), SpeculativeRow) {
			t.Fatalf("%s output has %d lines, or no %s row", f, n, SpeculativeRow)
		}
	}
}

func keys[V any](m map[string]V) string {
	var ks []string
	for k := range m {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return strings.Join(ks, ",")
}

func TestLadderBadInput(t *testing.T) {
	moe := ladderFixture(t, "trained/tiny-moe-kjv-f16.gguf")
	dense := ladderFixture(t, "trained/tiny-draft-kjv-f32.gguf")
	prof, _ := profile.Load("phone-mid")
	ctx := context.Background()
	if _, err := RunLadder(ctx, LadderConfig{Model: moe, Profile: prof, Budget: units.Budget{Bytes: 1000}, GenTokens: 4, NoOracle: true}); !errors.Is(err, expert.ErrBudgetTooSmall) {
		t.Fatalf("budget below one expert: %v", err)
	}
	if _, err := RunLadder(ctx, LadderConfig{Model: dense, Profile: prof, Budget: units.Budget{Fraction: 0.5}}); err == nil || !strings.Contains(err.Error(), "not a Mixture-of-Experts") {
		t.Fatalf("dense model: %v", err)
	}
	if _, err := RunReplay(ctx, ReplayConfig{LadderConfig: LadderConfig{Model: dense, Profile: prof, Budget: units.Budget{Fraction: 0.5}}, Compute: time.Millisecond}); err == nil || !strings.Contains(err.Error(), "not a Mixture-of-Experts") {
		t.Fatalf("replay of a dense model: %v", err)
	}
	if _, err := RunLadder(ctx, LadderConfig{Model: moe, Budget: units.Budget{Fraction: 0.5}}); err == nil {
		t.Fatal("no storage accepted")
	}
}

func TestReplay(t *testing.T) {
	path := ladderFixture(t, "trained/tiny-moe-kjv-f16.gguf")
	prof, _ := profile.Load("phone-mid")
	rep, err := RunReplay(context.Background(), ReplayConfig{
		LadderConfig: LadderConfig{Model: path, Profile: prof, Budget: units.Budget{Fraction: 0.25}, Repetitions: 1, Warmup: 1, PromptTokens: 4, GenTokens: 8},
		Compute:      2 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Rows) != len(expert.Modes()) || rep.Oracle == nil || !strings.Contains(rep.Profile, "replay") {
		t.Fatalf("report %+v", rep)
	}
	for _, r := range rep.Rows {
		if !r.IdenticalOutput || r.DecodeTokensPerSecond <= 0 || r.BytesReadPerToken <= 0 {
			t.Fatalf("row %+v", r)
		}
	}
	// The oracle reads what Belady's MIN misses: the fewest bytes of all,
	// and it hits more than the modes without prefetch.
	for _, r := range rep.Rows {
		if rep.Oracle.BytesReadPerToken > r.BytesReadPerToken {
			t.Fatalf("oracle reads %.0f bytes/token > %s's %.0f", rep.Oracle.BytesReadPerToken, r.Mode, r.BytesReadPerToken)
		}
		if !strings.Contains(r.Mode, "on-demand") {
			continue
		}
		if rep.Oracle.HitRate <= r.HitRate {
			t.Fatalf("oracle hit rate %.3f <= %s's %.3f", rep.Oracle.HitRate, r.Mode, r.HitRate)
		}
	}
	// 7 decode steps at 2 ms of compute each cannot beat 500 tok/s.
	if rep.Oracle.DecodeTokensPerSecond > 500 {
		t.Fatalf("oracle %.1f tok/s is faster than the emulated compute allows", rep.Oracle.DecodeTokensPerSecond)
	}
	if _, err := RunReplay(context.Background(), ReplayConfig{LadderConfig: LadderConfig{Model: path, Profile: prof, Budget: units.Budget{Fraction: 0.25}}}); err == nil {
		t.Fatal("replay without compute time accepted")
	}
}
