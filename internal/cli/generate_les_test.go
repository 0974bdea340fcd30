package cli_test

import (
	"context"
	"encoding/json"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/lesfarm/lesfarm/runtime/pack"
)

// generateJSONOut runs generate --format json and decodes its object.
func generateJSONOut(t *testing.T, args ...string) map[string]json.RawMessage {
	t.Helper()
	base := []string{"generate", "--prompt", "The quick brown fox", "--max-tokens", "8", "--threads", "1", "--format", "json"}
	code, out, errOut := run(t, append(base, args...)...)
	if code != 0 {
		t.Fatalf("generate %v: exit %d: %s", args, code, errOut)
	}
	var raw map[string]json.RawMessage
	if err := json.Unmarshal([]byte(out), &raw); err != nil {
		t.Fatalf("output is not one JSON object: %v\n%s", err, out)
	}
	return raw
}

func tokenIDs(t *testing.T, raw map[string]json.RawMessage) []int {
	t.Helper()
	var ids []int
	if err := json.Unmarshal(raw["token_ids"], &ids); err != nil {
		t.Fatal(err)
	}
	return ids
}

// TestGenerateStreamingMatchesResident streams experts through the LES
// store at a quarter of the expert bytes, in every mode and from the
// packed form of the model as well (which also loads resident), and
// requires the all-resident greedy tokens; the JSON keeps the issue-3 keys and adds the LES ones.
func TestGenerateStreamingMatchesResident(t *testing.T) {
	packed := filepath.Join(t.TempDir(), "packed.gguf")
	if err := pack.Pack(context.Background(), goldenQ4, packed, pack.Options{}); err != nil {
		t.Fatal(err)
	}
	want := tokenIDs(t, generateJSONOut(t, "--model", goldenQ4))
	if len(want) != 8 {
		t.Fatalf("resident run gave %d tokens, want 8", len(want))
	}
	cases := []struct{ name, model, mode string }{
		{"scheduled", goldenQ4, "scheduled"},
		{"on-demand", goldenQ4, "on-demand"},
		{"on-demand-parallel", goldenQ4, "on-demand-parallel"},
		{"lookahead", goldenQ4, "lookahead"},
		{"packed/resident", packed, "resident"},
		{"packed/scheduled", packed, "scheduled"},
		{"packed/on-demand", packed, "on-demand"},
	}
	baseKeys := []string{"prompt_token_ids", "token_ids", "text", "prefill_tokens_per_second", "decode_tokens_per_second", "ttft_ms"}
	lesKeys := []string{"mode", "profile", "time_base", "budget_bytes", "hit_rate", "predictor_precision", "predictor_recall", "stall_fraction", "bytes_read_per_token"}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			args := []string{"--model", tc.model, "--mode", tc.mode, "--expert-budget", "25%"}
			if tc.mode == "resident" {
				args = args[:4]
			}
			raw := generateJSONOut(t, args...)
			if got := tokenIDs(t, raw); !slices.Equal(got, want) {
				t.Fatalf("--mode %s tokens %v, resident %v", tc.mode, got, want)
			}
			if tc.mode == "resident" {
				if len(raw) != len(baseKeys) {
					t.Fatalf("resident JSON has %d keys, want the %d of issue 3", len(raw), len(baseKeys))
				}
				return
			}
			keys := make([]string, 0, len(raw))
			for k := range raw {
				keys = append(keys, k)
			}
			wantKeys := append(slices.Clone(baseKeys), lesKeys...)
			slices.Sort(keys)
			slices.Sort(wantKeys)
			if !slices.Equal(keys, wantKeys) {
				t.Fatalf("JSON keys %v, want %v", keys, wantKeys)
			}
			var les struct {
				Mode        string  `json:"mode"`
				Profile     string  `json:"profile"`
				BudgetBytes int64   `json:"budget_bytes"`
				HitRate     float64 `json:"hit_rate"`
				Stall       float64 `json:"stall_fraction"`
				BytesPerTok float64 `json:"bytes_read_per_token"`
			}
			b, _ := json.Marshal(raw)
			if err := json.Unmarshal(b, &les); err != nil {
				t.Fatal(err)
			}
			// The fixture's experts total 4 MiB; a quarter is 1 MiB.
			if les.Mode != tc.mode || les.Profile != "file" || les.BudgetBytes != 1<<20 {
				t.Errorf("mode %q profile %q budget %d, want %s, file, %d", les.Mode, les.Profile, les.BudgetBytes, tc.mode, 1<<20)
			}
			if les.HitRate < 0 || les.HitRate >= 1 || les.Stall < 0 || les.BytesPerTok <= 0 {
				t.Errorf("implausible LES figures at a 25%% budget: %+v", les)
			}
		})
	}
}

// TestGenerateDeviceTime: generate emulating a device that declares its
// compute runs on the device clock by default, as the farm measures the
// same config (measure.Config.DeviceTime), and on the host's with --time
// host; the tokens are the resident run's either way.
func TestGenerateDeviceTime(t *testing.T) {
	want := tokenIDs(t, generateJSONOut(t, "--model", goldenQ4))
	for _, tc := range []struct{ time, want string }{{"", "device"}, {"host", "host"}} {
		args := []string{"--model", goldenQ4, "--mode", "scheduled", "--expert-budget", "25%", "--profile", "phone-flagship"}
		if tc.time != "" {
			args = append(args, "--time", tc.time)
		}
		raw := generateJSONOut(t, args...)
		if got := tokenIDs(t, raw); !slices.Equal(got, want) {
			t.Fatalf("--time %q: tokens %v, resident %v", tc.time, got, want)
		}
		if string(raw["time_base"]) != `"`+tc.want+`"` || string(raw["profile"]) != `"phone-flagship"` {
			t.Fatalf("--time %q: time_base %s profile %s, want %s, phone-flagship", tc.time, raw["time_base"], raw["profile"], tc.want)
		}
	}
}

// TestGenerateStreamingBadInput checks that bad streaming flags exit 2
// with one line naming the fix, before or instead of generating.
func TestGenerateStreamingBadInput(t *testing.T) {
	m := []string{"generate", "--model", goldenQ4, "--prompt", "hi", "--threads", "1"}
	tests := []struct {
		name string
		args []string
		want string
	}{
		{"unknown mode", []string{"--mode", "warp"}, `--mode "warp" is not supported: use resident, on-demand`},
		{"oracle mode", []string{"--mode", "oracle", "--expert-budget", "0.5"}, "use lesfarm bench --ladder"},
		{"bad budget", []string{"--mode", "scheduled", "--expert-budget", "lots"}, `--expert-budget: budget "lots" is neither a fraction`},
		{"zero percent", []string{"--mode", "scheduled", "--expert-budget", "0%"}, "a percentage must be in (0, 100]"},
		{"no budget", []string{"--mode", "lookahead"}, "--mode lookahead needs --expert-budget"},
		{"budget below one expert", []string{"--mode", "scheduled", "--expert-budget", "1KiB"}, "budget smaller than one expert"},
		{"budget when resident", []string{"--expert-budget", "20%"}, "--expert-budget applies to a streaming --mode"},
		{"profile when resident", []string{"--profile", "phone-mid"}, "--profile applies to a streaming --mode"},
		{"unknown profile", []string{"--mode", "scheduled", "--expert-budget", "20%", "--profile", "floppy"}, `profile "floppy" is neither a built-in`},
		{"bad storage", []string{"--mode", "scheduled", "--expert-budget", "20%", "--storage", "tape"}, `--storage "tape" is not supported`},
		{"storage conflict", []string{"--mode", "scheduled", "--expert-budget", "20%", "--storage", "direct", "--profile", "phone-mid"}, "conflict"},
		{"bad policy", []string{"--mode", "scheduled", "--expert-budget", "20%", "--cache-policy", "fifo"}, `unknown cache policy "fifo"`},
		{"bad time", []string{"--mode", "scheduled", "--expert-budget", "20%", "--profile", "phone-mid", "--time", "wall"}, `--time: time base "wall" is not supported`},
		{"device time on direct storage", []string{"--mode", "scheduled", "--expert-budget", "20%", "--storage", "direct", "--time", "device"}, "direct storage has none"},
		{"time when resident", []string{"--time", "host"}, "--time applies to a streaming --mode"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, out, errOut := run(t, append(slices.Clone(m), tt.args...)...)
			if code != 2 {
				t.Fatalf("exit %d, want 2 (stderr %q)", code, errOut)
			}
			if out != "" {
				t.Errorf("stdout %q, want nothing", out)
			}
			if !strings.Contains(errOut, tt.want) || strings.Count(strings.TrimSpace(errOut), "\n") != 0 {
				t.Errorf("stderr %q, want one line containing %q", errOut, tt.want)
			}
		})
	}
}
