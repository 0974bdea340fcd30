package jobs

import (
	"encoding/json"
	"errors"
	fxdir "github.com/lesfarm/lesfarm/internal/fixture"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

const validYAML = `
name: ladder-test
suite: nightly
model:
  url: https://example.com/m.gguf
  sha256: 1b29724f7e45a176e7bdee3a70502a8d834507b307c7bb9f65759ff5b49b4e14
  size: 33001408
prompts:
  inline: ["In the beginning", "And David said"]
prefill_tokens: 32
decode_tokens: 16
matrix:
  modes: [resident, on-demand, lookahead]
  budgets: [25%, 512MiB]
  profiles: [phone-flagship, phone-budget]
warmup: 1
repetitions: 5
cooldown: 2s
timeout: 10m
devices:
  platform: android
  labels: {pool: ci}
  min_ram: 4GiB
  device_model: Pixel 8
retry:
  max_attempts: 4
priority: 10
`

func mustParse(t *testing.T, src string, f Format) *Spec {
	t.Helper()
	s, err := Parse([]byte(src), f)
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	return s
}

func TestParseValid(t *testing.T) {
	s := mustParse(t, validYAML, FormatYAML)
	if s.Name != "ladder-test" || s.SuiteName() != "nightly" || s.Repetitions != 5 || s.Warmup != 1 {
		t.Fatalf("unexpected spec: %+v", s)
	}
	if s.Devices.MinRAM != 4<<30 || s.Devices.Labels["pool"] != "ci" {
		t.Fatalf("selector: %+v", s.Devices)
	}
	if s.Cooldown.D().Seconds() != 2 || s.Timeout.D().Minutes() != 10 {
		t.Fatalf("durations: %v %v", s.Cooldown, s.Timeout)
	}
	want := []Budget{{Fraction: 0.25}, {Bytes: 512 << 20}}
	if !reflect.DeepEqual(s.Matrix.Budgets, want) {
		t.Fatalf("budgets = %+v, want %+v", s.Matrix.Budgets, want)
	}
	if s.Model.Layout != LayoutAsIs {
		t.Fatalf("default layout not applied: %q", s.Model.Layout)
	}
}

func TestJSONRoundTrip(t *testing.T) {
	s := mustParse(t, validYAML, FormatYAML)
	js, err := s.MarshalCanonical()
	if err != nil {
		t.Fatal(err)
	}
	s2 := mustParse(t, string(js), FormatJSON)
	if !reflect.DeepEqual(s, s2) {
		t.Fatalf("JSON round trip changed the spec:\n%+v\n%+v", s, s2)
	}
	if s.Fingerprint() != s2.Fingerprint() || len(s.Fingerprint()) != 64 {
		t.Fatalf("fingerprints differ")
	}
	// encoding/json alone (what an HTTP framework does) gives the same spec.
	var s3 Spec
	if err := json.Unmarshal(js, &s3); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(s, &s3) {
		t.Fatalf("encoding/json decode differs:\n%+v\n%+v", s, &s3)
	}
	y, err := s.YAML()
	if err != nil {
		t.Fatal(err)
	}
	s4 := mustParse(t, string(y), FormatYAML)
	if !reflect.DeepEqual(s, s4) {
		t.Fatalf("YAML round trip changed the spec:\n%s", y)
	}
}

func TestParseErrors(t *testing.T) {
	modes := "resident, on-demand, on-demand-parallel, lookahead, scheduled, mixed-precision, speculative"
	tests := []struct {
		name   string
		edit   func(string) string
		format Format
		want   string // substring of the error
	}{
		{"unknown mode", func(s string) string {
			return strings.Replace(s, "[resident, on-demand, lookahead]", "[resident, on-demand, lookahed]", 1)
		}, FormatYAML, `13:32: matrix.modes[2]: unknown mode "lookahed" (want one of ` + modes + `)`},
		{"unknown field", func(s string) string { return strings.Replace(s, "  budgets:", "  budgetz:", 1) }, FormatYAML,
			`14:3: matrix.budgetz: unknown field "budgetz" (want one of modes, budgets, profiles)`},
		{"bad sha", func(s string) string { return strings.Replace(s, "sha256: 1b", "sha256: zz", 1) }, FormatYAML,
			`6:11: model.sha256: invalid sha256`},
		{"missing budgets", func(s string) string { return strings.Replace(s, "  budgets: [25%, 512MiB]\n", "", 1) }, FormatYAML,
			`matrix.budgets: required when a streaming mode is listed`},
		{"bad budget", func(s string) string { return strings.Replace(s, "[25%, 512MiB]", "[25%, lots]", 1) }, FormatYAML,
			`budget "lots" is neither a fraction in (0, 1]`},
		{"budget over 100%", func(s string) string { return strings.Replace(s, "[25%, 512MiB]", "[25%, 150%]", 1) }, FormatYAML,
			`budget "150%": a percentage must be in (0, 100]`},
		{"dup budget", func(s string) string { return strings.Replace(s, "[25%, 512MiB]", "[25%, 0.25]", 1) }, FormatYAML,
			`matrix.budgets[1]: duplicate budget 25% (also at matrix.budgets[0])`},
		{"dup mode", func(s string) string { return strings.Replace(s, "lookahead]", "resident]", 1) }, FormatYAML,
			`matrix.modes[2]: duplicate mode "resident"`},
		{"bad platform", func(s string) string { return strings.Replace(s, "platform: android", "platform: symbian", 1) }, FormatYAML,
			`21:13: devices.platform: unknown platform "symbian"`},
		{"bad type", func(s string) string { return strings.Replace(s, "repetitions: 5", "repetitions: many", 1) }, FormatYAML,
			`17: cannot unmarshal !!str ` + "`many`" + ` into int`},
		{"repetitions range", func(s string) string { return strings.Replace(s, "repetitions: 5", "repetitions: 5000", 1) }, FormatYAML,
			`17:14: repetitions: 5000 out of range [1, 1000]`},
		{"no prompts", func(s string) string {
			return strings.Replace(s, `  inline: ["In the beginning", "And David said"]`, `  set: nosuch`, 1)
		}, FormatYAML, `prompts.set: unknown prompt set "nosuch" (want one of kjv, long, smoke)`},
		{"url and path", func(s string) string {
			return strings.Replace(s, "  size: 33001408", "  size: 33001408\n  path: /m.gguf", 1)
		}, FormatYAML,
			`model.path: set either url or path, not both`},
		{"timeout", func(s string) string { return strings.Replace(s, "timeout: 10m", "timeout: 100h", 1) }, FormatYAML,
			`timeout: 100h0m0s out of range`},
		{"bad duration", func(s string) string { return strings.Replace(s, "cooldown: 2s", "cooldown: soon", 1) }, FormatYAML,
			`invalid duration "soon"`},
		{"not a mapping", func(string) string { return "- a\n- b\n" }, FormatYAML, `spec must be a mapping`},
		{"empty", func(string) string { return "" }, FormatYAML, `empty spec`},
		{"json syntax", func(string) string { return "{\n  \"name\": \"x\",\n  \"model\": }" }, FormatJSON, `3:12: invalid JSON`},
		{"json trailing", func(string) string { return `{"name":"x"} {}` }, FormatJSON, `data after the top-level value`},
		{"json unknown field", func(string) string {
			return `{"name":"x","matrix":{"modes":["resident"],"nope":1}}`
		}, FormatJSON, `1:44: matrix.nope: unknown field "nope"`},
		{"bad name", func(s string) string { return strings.Replace(s, "name: ladder-test", "name: Ladder Test", 1) }, FormatYAML,
			`2:7: name: invalid name "Ladder Test"`},
		{"label key", func(s string) string { return strings.Replace(s, "{pool: ci}", `{"bad key": ci}`, 1) }, FormatYAML,
			`devices.labels.bad key: invalid label key`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse([]byte(tt.edit(validYAML)), tt.format)
			if err == nil {
				t.Fatalf("Parse succeeded, want error containing %q", tt.want)
			}
			var ve *ValidationError
			if !errors.As(err, &ve) {
				t.Fatalf("error %T is not a *ValidationError: %v", err, err)
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("error\n  %v\nwant it to contain\n  %s", err, tt.want)
			}
			if strings.Contains(err.Error(), "\n") {
				t.Fatalf("error is not one line: %q", err)
			}
		})
	}
}

func TestParseFileNamesSource(t *testing.T) {
	p := filepath.Join(t.TempDir(), "bad.yaml")
	if err := os.WriteFile(p, []byte(strings.Replace(validYAML, "lookahead]", "lookahed]", 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := ParseFile(p)
	if err == nil || !strings.HasPrefix(err.Error(), p+":13:32: matrix.modes[2]: unknown mode") {
		t.Fatalf("got %v", err)
	}
}

func TestExpandDeterministic(t *testing.T) {
	s := mustParse(t, validYAML, FormatYAML)
	got := s.Expand()
	var keys []string
	for i, c := range got {
		if c.Index != i {
			t.Fatalf("config %d has index %d", i, c.Index)
		}
		keys = append(keys, c.Key)
	}
	want := []string{
		"resident/profile=phone-flagship",
		"resident/profile=phone-budget",
		"on-demand/budget=25%/profile=phone-flagship",
		"on-demand/budget=25%/profile=phone-budget",
		"on-demand/budget=512MiB/profile=phone-flagship",
		"on-demand/budget=512MiB/profile=phone-budget",
		"lookahead/budget=25%/profile=phone-flagship",
		"lookahead/budget=25%/profile=phone-budget",
		"lookahead/budget=512MiB/profile=phone-flagship",
		"lookahead/budget=512MiB/profile=phone-budget",
	}
	if !reflect.DeepEqual(keys, want) {
		t.Fatalf("keys:\n%s\nwant:\n%s", strings.Join(keys, "\n"), strings.Join(want, "\n"))
	}
	if n := s.Matrix.count(); n != len(got) {
		t.Fatalf("count() = %d, Expand gave %d", n, len(got))
	}
	for range 5 {
		if !reflect.DeepEqual(s.Expand(), got) {
			t.Fatal("Expand is not deterministic")
		}
	}
	if got[4].Budget.Resolve(1<<30) != 512<<20 || got[2].Budget.Resolve(1000) != 250 {
		t.Fatalf("Resolve wrong: %+v %+v", got[4].Budget, got[2].Budget)
	}
}

func TestBuiltins(t *testing.T) {
	names := BuiltinNames()
	if !reflect.DeepEqual(names, []string{"calibrate", "les-demo", "les-ladder", "les-ladder-qwen35moe", "smoke"}) {
		t.Fatalf("builtins = %v", names)
	}
	for _, n := range names {
		s, err := Builtin(n)
		if err != nil {
			t.Fatalf("%s: %v", n, err)
		}
		if s.Name != n || len(s.Expand()) == 0 || len(s.ResolvePrompts()) == 0 {
			t.Fatalf("%s: bad builtin %+v", n, s)
		}
	}
	ladder, _ := Builtin("les-ladder")
	if n := len(ladder.Expand()); n != 1+6*3 {
		t.Fatalf("les-ladder expands to %d configs, want 19", n)
	}
	if _, err := Builtin("nope"); err == nil || !strings.Contains(err.Error(), "have calibrate, les-demo, les-ladder, les-ladder-qwen35moe, smoke") {
		t.Fatalf("got %v", err)
	}
	cal, _ := Builtin(SuiteCalibrate)
	if cal.SuiteName() != SuiteCalibrate || len(cal.Expand()) != 1 || cal.Devices.Emulated == nil || *cal.Devices.Emulated {
		t.Fatalf("calibrate: suite %q, %d configs, emulated %v: want one config on real devices", cal.SuiteName(), len(cal.Expand()), cal.Devices.Emulated)
	}
	q35, _ := Builtin("les-ladder-qwen35moe")
	if q35.Model.Layout != LayoutPackedCompat || len(q35.Expand()) != 1+3*2 {
		t.Fatalf("les-ladder-qwen35moe: layout %q, %d configs", q35.Model.Layout, len(q35.Expand()))
	}
	if st, err := os.Stat(filepath.Join("..", "..", "shared", "testdata", "qwen35moe", q35.Model.Name)); err == nil && st.Size() != int64(q35.Model.Size) {
		t.Fatalf("les-ladder-qwen35moe: fixture has %d bytes, the suite says %d", st.Size(), q35.Model.Size)
	}
	// The built-in suites reference the trained fixture model; check the
	// digest still matches when the fixture is present.
	smoke, _ := Builtin("smoke")
	fixture := filepath.Join(fxdir.SharedDir(), "trained", smoke.Model.Name)
	if st, err := os.Stat(fixture); err == nil && st.Size() != int64(smoke.Model.Size) {
		t.Fatalf("fixture %s is %d bytes, suite says %d", fixture, st.Size(), smoke.Model.Size)
	}
}

func TestApplyOverride(t *testing.T) {
	s, _ := Builtin("les-ladder")
	reps := 1
	c, err := s.Apply(&Override{Modes: []Mode{ModeLookahead}, Budgets: []Budget{{Fraction: 0.5}}, Repetitions: &reps})
	if err != nil {
		t.Fatal(err)
	}
	if len(c.Expand()) != 1 || c.Repetitions != 1 {
		t.Fatalf("override not applied: %+v", c.Expand())
	}
	if len(s.Expand()) != 19 {
		t.Fatal("Apply modified the original")
	}
	_, err = s.Apply(&Override{Modes: []Mode{"warp"}})
	if err == nil || !strings.Contains(err.Error(), `matrix.modes[0]: unknown mode "warp"`) {
		t.Fatalf("got %v", err)
	}
}

func TestUnits(t *testing.T) {
	sizes := map[string]ByteSize{"4096": 4096, "4KiB": 4096, "4k": 4096, "2GB": 2e9, "1.5GiB": 3 << 29, "0": 0, "7 MiB": 7 << 20}
	for in, want := range sizes {
		got, err := ParseByteSize(in)
		if err != nil || got != want {
			t.Errorf("ParseByteSize(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, bad := range []string{"", "-1", "x", "1e400", "99999999999TiB", "NaN"} {
		if _, err := ParseByteSize(bad); err == nil {
			t.Errorf("ParseByteSize(%q) succeeded", bad)
		}
	}
	budgets := map[string]Budget{"25%": {Fraction: .25}, "0.5": {Fraction: .5}, "1": {Fraction: 1}, "2GiB": {Bytes: 2 << 30}, "1048576": {Bytes: 1 << 20}}
	for in, want := range budgets {
		got, err := ParseBudget(in)
		if err != nil || got != want {
			t.Errorf("ParseBudget(%q) = %+v, %v; want %+v", in, got, err, want)
		}
		if again, err := ParseBudget(got.String()); err != nil || again != got {
			t.Errorf("ParseBudget(String(%q)=%q) = %+v, %v", in, got.String(), again, err)
		}
	}
	for _, bad := range []string{"", "%", "1.5", "lots", "NaN%"} {
		if _, err := ParseBudget(bad); err == nil {
			t.Errorf("ParseBudget(%q) succeeded", bad)
		}
	}
}

// TestFixtureSpecs parses every spec under testdata/: the ones named
// bad-*.yaml must fail with the message stored in the matching .err file.
func TestFixtureSpecs(t *testing.T) {
	files, _ := filepath.Glob("testdata/*.yaml")
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			_, err := ParseFile(f)
			bad := strings.HasPrefix(filepath.Base(f), "bad-")
			if !bad && err != nil {
				t.Fatal(err)
			}
			if bad {
				want, rerr := os.ReadFile(strings.TrimSuffix(f, ".yaml") + ".err")
				if rerr != nil {
					t.Fatal(rerr)
				}
				if err == nil || err.Error() != strings.TrimSpace(string(want)) {
					t.Fatalf("got  %v\nwant %s", err, want)
				}
			}
		})
	}
}
