package protocol

import (
	"bytes"
	"encoding/json"
	"reflect"
	"strings"
	"testing"

	"github.com/lesfarm/lesfarm/jobs"
)

// runnerSamples is one valid line of every type.
func runnerSamples() []RunnerLine {
	return []RunnerLine{
		{T: RunnerHello, Protocol: 1, Revision: "0123456789abcdef0123456789abcdef01234567", GoVersion: "go1.26.8", Module: "(devel)", Modified: true},
		{T: RunnerProgress, Progress: &Progress{Phase: "pack", Message: "blob"}},
		{T: RunnerConfig, Index: 2},
		{T: RunnerPos, Config: 2, Rep: -1},
		{T: RunnerStep, Step: &RunnerStepData{Step: 3, Phase: PhaseDecode, Pos: 17, Tokens: 1, DurationNS: 1234567, StallNS: 100, BytesRead: 4096, CacheBytes: 1 << 20,
			Layers: &RunnerLayers{Layer: []int{0, 1}, Hits: []int{1, 2}, Misses: []int{1, 0}, ComputeNS: []int64{10, 20},
				Selected: [][]int{{3, 7}, {1, 2}}, Missed: [][]int{{7}, nil}}}},
		{T: RunnerStep, Step: &RunnerStepData{Phase: PhasePrefill, Tokens: 32, DurationNS: 1}},
		{T: RunnerResult, Result: &ConfigResult{ConfigIndex: 2, ConfigKey: "lookahead/budget=50%", Valid: true, Repetitions: 3,
			TokensSHA256: strings.Repeat("ab", 32), DecodeTPS: Stat{N: 3, Mean: 41.5}}},
		{T: RunnerDone},
		{T: RunnerError, Error: "reading the job: EOF"},
	}
}

func TestRunnerLinesRoundTrip(t *testing.T) {
	t.Parallel()
	for _, want := range runnerSamples() {
		b, err := json.Marshal(&want)
		if err != nil {
			t.Fatal(err)
		}
		var got RunnerLine
		if err := ParseRunnerLine(b, &got); err != nil {
			t.Fatalf("%s line %s rejected: %v", want.T, b, err)
		}
		b2, _ := json.Marshal(&got)
		if !bytes.Equal(b, b2) {
			t.Errorf("%s line changed in a round trip:\n%s\n%s", want.T, b, b2)
		}
	}
}

func TestRunnerLineRejects(t *testing.T) {
	t.Parallel()
	long := `{"t":"error","error":"` + strings.Repeat("x", MaxRunnerLineBytes) + `"}`
	for _, tc := range []struct {
		name, line, kind, in string
	}{
		{"not json", `hello`, RejectMalformed, ""},
		{"empty", ``, RejectMalformed, ""},
		{"unknown type", `{"t":"bogus"}`, RejectInvalid, "unknown line type"},
		{"no type", `{"protocol":1}`, RejectInvalid, "unknown line type"},
		{"hello without version", `{"t":"hello"}`, RejectInvalid, "protocol 0"},
		{"hello long revision", `{"t":"hello","protocol":1,"revision":"` + strings.Repeat("a", 300) + `"}`, RejectInvalid, "256 bytes"},
		{"config negative", `{"t":"config","i":-1}`, RejectInvalid, "out of range"},
		{"pos rep", `{"t":"pos","cfg":0,"rep":-1000}`, RejectInvalid, "out of range"},
		{"step missing", `{"t":"step"}`, RejectInvalid, "step missing"},
		{"step phase", `{"t":"step","step":{"ph":"think","n":1}}`, RejectInvalid, "phase"},
		{"step negative", `{"t":"step","step":{"ph":"decode","n":1,"d":-5}}`, RejectInvalid, "non-negative"},
		{"layer out of range", layersLine(1, &RunnerLayers{Layer: []int{512}}), RejectMalformed, "layer 512 out of range"},
		{"expert id", layersLine(1, &RunnerLayers{Layer: []int{0}, Selected: [][]int{{4096}}}), RejectMalformed, "expert 4096 out of range"},
		{"count", layersLine(1, &RunnerLayers{Layer: []int{0}, Hits: []int{5000}}), RejectMalformed, "hits 5000 out of range"},
		{"no layers", layersLine(0, &RunnerLayers{}), RejectMalformed, "step.l.n 0 out of range"},
		{"more events than data", layersLine(2, &RunnerLayers{Layer: []int{0}}), RejectMalformed, "step.l.n 2 out of range"},
		{"fewer events than data", layersLine(1, &RunnerLayers{Layer: []int{0, 1}, Hits: []int{1, 2}}), RejectMalformed, "bytes after 1 events"},
		{"truncated", layersLine(1, &RunnerLayers{Layer: []int{0}, Selected: [][]int{{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11}}})[:60] + `"}}}`, RejectMalformed, ""},
		{"encoding", `{"t":"step","step":{"ph":"decode","n":1,"l":{"n":1,"enc":"json","data":"AAAAAAAAAAAAAA=="}}}`, RejectMalformed, `enc "json" unsupported`},
		{"result missing", `{"t":"result"}`, RejectInvalid, "result missing"},
		{"result bad rate", `{"t":"result","result":{"config_index":0,"config_key":"k","hit_rate":2}}`, RejectInvalid, "hit_rate"},
		{"error empty", `{"t":"error"}`, RejectInvalid, "message missing"},
		{"wrong field type", `{"t":"config","i":"x"}`, RejectMalformed, ""},
		{"too long", long, RejectOversized, "limit"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var l RunnerLine
			err := ParseRunnerLine([]byte(tc.line), &l)
			if err == nil {
				t.Fatalf("accepted %.80s", tc.line)
			}
			if RejectKind(err) != tc.kind || !strings.Contains(err.Error(), tc.in) {
				t.Fatalf("err = %v (kind %q), want kind %q containing %q", err, RejectKind(err), tc.kind, tc.in)
			}
		})
	}
}

// layersLine is a step line whose layers are l's blob, claiming n events.
func layersLine(n int, l *RunnerLayers) string {
	b, _ := json.Marshal(&runnerLayersWire{N: n, Enc: RunnerLayersEncoding, Data: appendLayers(nil, l)})
	return `{"t":"step","step":{"ph":"decode","n":1,"l":` + string(b) + `}}`
}

// TestRunnerLayersValidate: a column of another length than Layer is
// refused (the blob cannot carry one; a struct can).
func TestRunnerLayersValidate(t *testing.T) {
	t.Parallel()
	l := RunnerLine{T: RunnerStep, Step: &RunnerStepData{Phase: PhaseDecode, Layers: &RunnerLayers{Layer: []int{0, 1}, Hits: []int{1}}}}
	if err := l.Validate(); err == nil || !strings.Contains(err.Error(), "1 entries for 2") {
		t.Fatalf("err = %v", err)
	}
}

// TestAppendRunnerStepLine: the hand-written step line is json.Marshal's,
// and the one-pass scanner reads it as encoding/json does.
func TestAppendRunnerStepLine(t *testing.T) {
	t.Parallel()
	for _, l := range runnerSamples() {
		if l.T != RunnerStep {
			continue
		}
		want, err := json.Marshal(&l)
		if err != nil {
			t.Fatal(err)
		}
		got := AppendRunnerStepLine([]byte("prefix"), l.Step)
		if string(got) != "prefix"+string(want) {
			t.Fatalf("AppendRunnerStepLine:\n%s\njson.Marshal:\n%s", got[6:], want)
		}
		var scanned, decoded RunnerLine
		if !scanRunnerStep(want, &scanned) {
			t.Fatalf("scanner refused %s", want)
		}
		if err := json.Unmarshal(want, &decoded); err != nil || !reflect.DeepEqual(scanned, decoded) {
			t.Fatalf("scanned %+v, decoded %+v (%v)", scanned.Step, decoded.Step, err)
		}
	}
}

// TestParseRunnerLineResets: a line leaves nothing of the one parsed
// before it into the same RunnerLine.
func TestParseRunnerLineResets(t *testing.T) {
	t.Parallel()
	var l RunnerLine
	if err := ParseRunnerLine([]byte(`{"t":"pos","cfg":3,"rep":2}`), &l); err != nil {
		t.Fatal(err)
	}
	if err := ParseRunnerLine([]byte(`{"t":"done"}`), &l); err != nil {
		t.Fatal(err)
	}
	if l != (RunnerLine{T: RunnerDone}) {
		t.Fatalf("after done: %+v", l)
	}
}

// TestParseRunnerLineReusesSteps: step lines parsed into one RunnerLine
// reuse its arrays, and each parse still gives exactly its own line.
func TestParseRunnerLineReusesSteps(t *testing.T) {
	t.Parallel()
	big := &RunnerStepData{Step: 1, Phase: PhaseDecode, Tokens: 1, Layers: &RunnerLayers{Layer: []int{0, 1, 2}, Hits: []int{1, 2, 3},
		Selected: [][]int{{1, 2, 3}, {4, 5}, {6}}, Predicted: [][]int{{1}, nil, {7, 8}}}}
	small := &RunnerStepData{Step: 2, Phase: PhaseVerify, Tokens: 3, Layers: &RunnerLayers{Layer: []int{5}, Missed: [][]int{{9}}}}
	var l RunnerLine
	for i, st := range []*RunnerStepData{big, small, big, nil, small} {
		line := []byte(`{"t":"pos","cfg":1,"rep":0}`)
		if st != nil {
			line = AppendRunnerStepLine(nil, st)
		}
		if err := ParseRunnerLine(line, &l); err != nil {
			t.Fatal(err)
		}
		var fresh RunnerLine
		if err := json.Unmarshal(line, &fresh); err != nil {
			t.Fatal(err)
		}
		got, _ := json.Marshal(&l)
		want, _ := json.Marshal(&fresh)
		if !bytes.Equal(got, want) || (st != nil && !reflect.DeepEqual(l.Step.Layers.Selected, fresh.Step.Layers.Selected)) {
			t.Fatalf("line %d parsed as %s, want %s", i, got, want)
		}
	}
}

func TestCheckRunnerProtocol(t *testing.T) {
	t.Parallel()
	for v := 1; v <= RunnerProtocolVersion; v++ {
		if err := CheckRunnerProtocol(v); err != nil {
			t.Errorf("version %d refused: %v", v, err)
		}
	}
	for _, v := range []int{0, -1, RunnerProtocolVersion + 1, 99} {
		err := CheckRunnerProtocol(v)
		if err == nil {
			t.Fatalf("version %d accepted", v)
		}
		// The message names both versions.
		if msg := err.Error(); !strings.Contains(msg, "protocol "+itoa(v)) || !strings.Contains(msg, "1 to "+itoa(RunnerProtocolVersion)) {
			t.Errorf("version %d: %q does not name both versions", v, msg)
		}
	}
}

func itoa(v int) string { b, _ := json.Marshal(v); return string(b) }

func sampleRunnerJob(t testing.TB) *RunnerJob {
	t.Helper()
	spec, err := jobs.Builtin("smoke")
	if err != nil {
		t.Fatal(err)
	}
	return &RunnerJob{Protocol: RunnerProtocolVersion, Spec: *spec, Configs: spec.Expand(), ModelPath: "/models/m.gguf", WorkDir: "/cache", Threads: 4,
		Profile: &RunnerProfile{Name: "phone-flagship", Bandwidth: 3.5e9, LatencyNS: 80000, MaxInFlight: 8, RAMBudget: 8 << 30,
			Compute: &RunnerCompute{WeightBandwidth: 60e9, Throughput: 2e12},
			Service: &RunnerServiceTimes{Sizes: []int64{4096}, QueueDepths: []int{1, 4}, TimesNS: [][]int64{{80000, 90000}}}},
		Pin: true, Gate: RunnerGate{MaxTempC: 45, TimeoutNS: 1e9}}
}

func TestDecodeRunnerJob(t *testing.T) {
	t.Parallel()
	j := sampleRunnerJob(t)
	b, err := json.Marshal(j)
	if err != nil {
		t.Fatal(err)
	}
	got, err := DecodeRunnerJob(b)
	if err != nil {
		t.Fatal(err)
	}
	b2, _ := json.Marshal(got)
	if !bytes.Equal(b, b2) {
		t.Fatalf("job changed in a round trip:\n%s\n%s", b, b2)
	}
	for _, tc := range []struct {
		name string
		edit func(*RunnerJob)
		kind string
		in   string
	}{
		{"newer agent", func(j *RunnerJob) { j.Protocol = RunnerProtocolVersion + 1 }, RejectVersion, "the agent speaks runner protocol 2; this build speaks runner protocol 1 to 1"},
		{"no version", func(j *RunnerJob) { j.Protocol = 0 }, RejectVersion, "protocol 0"},
		{"no model", func(j *RunnerJob) { j.ModelPath = "" }, RejectInvalid, "model_path"},
		{"no configs", func(j *RunnerJob) { j.Configs = nil }, RejectInvalid, "0 configs"},
		{"threads", func(j *RunnerJob) { j.Threads = -1 }, RejectInvalid, "threads"},
		{"profile", func(j *RunnerJob) { j.Profile.MaxInFlight = 0 }, RejectInvalid, "max_in_flight"},
		{"gate", func(j *RunnerJob) { j.Gate.PollNS = -1 }, RejectInvalid, "thermal_gate"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			j := sampleRunnerJob(t)
			tc.edit(j)
			b, _ := json.Marshal(j)
			_, err := DecodeRunnerJob(b)
			if RejectKind(err) != tc.kind || !strings.Contains(err.Error(), tc.in) {
				t.Fatalf("err = %v, want kind %s containing %q", err, tc.kind, tc.in)
			}
		})
	}
	if _, err := DecodeRunnerJob(bytes.Repeat([]byte(" "), MaxRunnerJobBytes+1)); RejectKind(err) != RejectOversized {
		t.Fatalf("oversized job: %v", err)
	}
}

// FuzzRunnerLine: the runner line parser never panics, rejects with a
// *DecodeError, and what it accepts re-encodes to a line it accepts again
// unchanged.
func FuzzRunnerLine(f *testing.F) {
	for _, s := range runnerSamples() {
		b, err := json.Marshal(&s)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add([]byte(layersLine(2, &RunnerLayers{Layer: []int{0, 0}, Predicted: [][]int{{1}, {2}}})))
	f.Add([]byte(`{"t":"hello","protocol":99}`))
	f.Add([]byte(`null`))
	f.Add([]byte(`{"t":"result","result":null}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		var scanned, decoded RunnerLine
		if scanRunnerStep(data, &scanned) {
			if err := json.Unmarshal(data, &decoded); err != nil || !reflect.DeepEqual(scanned, decoded) {
				t.Fatalf("scanner and encoding/json disagree on %q: %+v vs %+v (%v)", data, scanned.Step, decoded.Step, err)
			}
		}
		var l RunnerLine
		err := ParseRunnerLine(data, &l)
		if err != nil {
			if RejectKind(err) == "" {
				t.Fatalf("error is not a *DecodeError: %v", err)
			}
			return
		}
		b1, err := json.Marshal(&l)
		if err != nil {
			t.Fatalf("accepted line does not encode: %v", err)
		}
		var again RunnerLine
		if err := ParseRunnerLine(b1, &again); err != nil {
			t.Fatalf("re-encoded line rejected: %v\n%s", err, b1)
		}
		b2, _ := json.Marshal(&again)
		if !bytes.Equal(b1, b2) {
			t.Fatalf("not a fixed point:\n%s\n%s", b1, b2)
		}
	})
}
