package protocol

import (
	"bytes"
	"crypto/ed25519"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/lesfarm/lesfarm/jobs"
)

var t0 = time.Date(2026, 11, 30, 3, 0, 0, 0, time.UTC)

func i64(v int64) *int64 { return &v }

func sampleHello() *Hello {
	return &Hello{DeviceID: "pixel-8-01", Fingerprint: Fingerprint{Platform: "android", DeviceModel: "Pixel 8", Cores: 9,
		RAMBytes: i64(8 << 30), AgentBuild: "v0 (rev abc)"}, Labels: map[string]string{"pool": "ci"}, SentAt: t0}
}

func sampleAssignment(t testing.TB) *Assignment {
	spec, err := jobs.Builtin("smoke")
	if err != nil {
		t.Fatal(err)
	}
	return &Assignment{RunID: 42, Token: 7, Attempt: 1, DeviceID: "pixel-8-01", JobID: 3, Suite: "smoke", Build: "b1",
		Spec: *spec, Configs: spec.Expand(),
		Artifact:       Artifact{URL: "http://127.0.0.1:8080/v1/artifacts/" + spec.Model.SHA256, SHA256: spec.Model.SHA256, Size: int64(spec.Model.Size)},
		LeaseExpiresAt: t0.Add(30 * time.Second), Deadline: t0.Add(5 * time.Minute), IssuedAt: t0}
}

func sampleTelemetry(n int) *TelemetryBatch {
	b := &TelemetryBatch{RunID: 42, Token: 7, DeviceID: "pixel-8-01", Seq: 3, SentAt: t0}
	for i := range n {
		b.Samples = append(b.Samples, Sample{ConfigIndex: 1, Step: i, Phase: PhaseDecode, Pos: 16 + i, Tokens: 1,
			DurationNS: 12_000_000, StallNS: 3_000_000, BytesRead: 147456, CacheBytes: 1 << 20,
			Layers: &LayerCounts{Hits: []int32{3, 4, 2, 4, 3, 1}, Misses: []int32{1, 0, 2, 0, 1, 3},
				PrefetchUsed: []int32{0, 1, 1, 0, 0, 0}, PrefetchWasted: []int32{0, 0, 1, 1, 0, 0}}})
	}
	if n > 0 {
		b.Experts = []ExpertLoad{{ConfigIndex: 1, Layer: 0, Steps: n, Experts: []int32{2, 7, 300}, Demand: []int32{int32(n), 1, 1}, Miss: []int32{0, 1, 1}},
			{ConfigIndex: 1, Layer: 5, Steps: n, Experts: []int32{0}, Demand: []int32{int32(n)}, Miss: []int32{int32(n)}}}
	}
	return b
}

func sampleResult() *Result {
	return &Result{RunID: 42, Token: 7, DeviceID: "pixel-8-01", Outcome: OutcomeSucceeded, TelemetryBatches: 4, TelemetrySamples: 64,
		Configs: []ConfigResult{{ConfigIndex: 0, ConfigKey: "resident", DecodeTPS: Stat{N: 3, Mean: 40, Median: 40, Stddev: 1, CV: 0.025},
			HitRate: 1, Repetitions: 3, Valid: true}},
		StartedAt: t0, FinishedAt: t0.Add(time.Minute)}
}

// allSamples returns one valid message of every type.
func allSamples(t testing.TB) []Message {
	_, priv, _ := ed25519.GenerateKey(bytes.NewReader(make([]byte, 64)))
	signed, err := SignAssignment(sampleAssignment(t), priv)
	if err != nil {
		t.Fatal(err)
	}
	sa, err := DecodeSignedAssignment(signed)
	if err != nil {
		t.Fatal(err)
	}
	return []Message{
		sampleHello(),
		&HelloReply{DeviceID: "pixel-8-01", Accepted: true, TTLMS: 15000, HeartbeatIntervalMS: 5000, SigningKey: priv.Public().(ed25519.PublicKey), ServerTime: t0},
		&Heartbeat{DeviceID: "pixel-8-01", Seq: 9, Runs: []RunStatus{{RunID: 42, Token: 7, State: RunStateRunning, Progress: 0.5}}, SentAt: t0},
		&HeartbeatReply{TTLMS: 15000, Renewed: []LeaseRenewal{{RunID: 42, Token: 7, ExpiresAt: t0}}, Cancel: []CancelNotice{{RunID: 41, Token: 2, Reason: "cancelled by user"}}, ServerTime: t0},
		sampleAssignment(t),
		sa,
		&AssignReply{RunID: 42, Token: 7, Accepted: true},
		&Cancel{RunID: 42, Token: 7, Reason: "user"},
		&CancelReply{RunID: 42, Known: true},
		sampleTelemetry(3),
		sampleResult(),
	}
}

func decodeAny(m Message, data []byte) (Message, error) {
	switch m.(type) {
	case *Hello:
		return DecodeHello(data)
	case *HelloReply:
		return DecodeHelloReply(data)
	case *Heartbeat:
		return DecodeHeartbeat(data)
	case *HeartbeatReply:
		return DecodeHeartbeatReply(data)
	case *Assignment:
		return DecodeAssignment(data)
	case *SignedAssignment:
		return DecodeSignedAssignment(data)
	case *AssignReply:
		return DecodeAssignReply(data)
	case *Cancel:
		return DecodeCancel(data)
	case *CancelReply:
		return DecodeCancelReply(data)
	case *TelemetryBatch:
		return DecodeTelemetry(data)
	case *Result:
		return DecodeResult(data)
	}
	panic("unknown type")
}

func TestRoundTrip(t *testing.T) {
	for _, m := range allSamples(t) {
		t.Run(m.MessageType(), func(t *testing.T) {
			b, err := Encode(m)
			if err != nil {
				t.Fatal(err)
			}
			got, err := decodeAny(m, b)
			if err != nil {
				t.Fatal(err)
			}
			b2, err := Encode(got)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(b, b2) {
				t.Fatalf("round trip differs:\n%s\n%s", b, b2)
			}
		})
	}
}

func TestRejections(t *testing.T) {
	var rc RejectCounter
	hello, _ := Encode(sampleHello())
	tel, _ := Encode(sampleTelemetry(2))
	bp := sampleTelemetry(1)
	bp.V = Version
	bp.Samples[0].Phase = "decoed"
	badPhase, _ := json.Marshal(bp)
	short := sampleTelemetry(2)
	short.V = Version
	short.Samples = short.Samples[:1]
	one, _ := json.Marshal(short)
	truncated := bytes.Replace(one, []byte(`"n":1`), []byte(`"n":2`), 1)
	tests := []struct {
		name string
		data []byte
		dec  func([]byte) error
		kind string
		msg  string
	}{
		{"oversized", append(bytes.Repeat([]byte(" "), MaxHelloBytes), hello...), func(d []byte) error { _, err := DecodeHello(d); return err }, RejectOversized, "exceeds the 65536-byte limit"},
		{"not json", []byte("{nope"), func(d []byte) error { _, err := DecodeHello(d); return err }, RejectMalformed, "invalid character"},
		{"wrong type", []byte(`{"v":1,"device_id":5}`), func(d []byte) error { _, err := DecodeHello(d); return err }, RejectMalformed, "cannot unmarshal number"},
		{"no version", bytes.Replace(hello, []byte(`"v":1,`), nil, 1), func(d []byte) error { _, err := DecodeHello(d); return err }, RejectVersion, "missing protocol version"},
		{"future version", bytes.Replace(hello, []byte(`"v":1,`), []byte(`"v":2,`), 1), func(d []byte) error { _, err := DecodeHello(d); return err }, RejectVersion, "unsupported protocol version 2"},
		{"bad device id", bytes.Replace(hello, []byte(`pixel-8-01`), []byte(`pixel.8`), 1), func(d []byte) error { _, err := DecodeHello(d); return err }, RejectInvalid, `device_id "pixel.8" invalid`},
		{"bad phase", badPhase, func(d []byte) error { _, err := DecodeTelemetry(d); return err }, RejectInvalid, `samples[0]: phase "" unknown`},
		{"truncated samples", truncated, func(d []byte) error { _, err := DecodeTelemetry(d); return err }, RejectMalformed, "truncated"},
		{"bad encoding", bytes.Replace(tel, []byte(SamplesEncoding), []byte("csv"), 1), func(d []byte) error { _, err := DecodeTelemetry(d); return err }, RejectMalformed, `samples.enc "csv" unsupported`},
		{"zero token", bytes.Replace(tel, []byte(`"token":7`), []byte(`"token":0`), 1), func(d []byte) error { _, err := DecodeTelemetry(d); return err }, RejectInvalid, "token 0 must be positive"},
		{"failed without error", []byte(`{"v":1,"run_id":1,"token":1,"device_id":"d","outcome":"failed"}`), func(d []byte) error { _, err := DecodeResult(d); return err }, RejectInvalid, "needs an error"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := rc.Observe(tt.dec(tt.data))
			if err == nil {
				t.Fatal("accepted")
			}
			if RejectKind(err) != tt.kind || !strings.Contains(err.Error(), tt.msg) {
				t.Fatalf("got kind %q: %v; want %q containing %q", RejectKind(err), err, tt.kind, tt.msg)
			}
		})
	}
	if rc.Total() != uint64(len(tests)) {
		t.Fatalf("counted %d rejections, want %d (%s)", rc.Total(), len(tests), rc.String())
	}
	if n := rc.Snapshot()[RejectKey{"telemetry", RejectInvalid}]; n != 2 {
		t.Fatalf("telemetry/invalid = %d, want 2", n)
	}
}

func TestEncodeRefusesInvalid(t *testing.T) {
	b := sampleTelemetry(1)
	b.Samples[0].Tokens = 0
	if _, err := Encode(b); err == nil || !strings.Contains(err.Error(), "tokens 0 out of range") {
		t.Fatalf("got %v", err)
	}
	ragged := sampleTelemetry(1)
	ragged.Samples[0].Layers.Hits = []int32{1}
	if _, err := Encode(ragged); err == nil || !strings.Contains(err.Error(), "same length") {
		t.Fatalf("ragged layers encoded: %v", err)
	}
	big := sampleTelemetry(MaxSamplesPerBatch)
	for i := range big.Samples {
		l := make([]int32, 160)
		for j := range l {
			l[j] = 1 << 20
		}
		big.Samples[i].Layers = &LayerCounts{Hits: l, Misses: l, PrefetchUsed: l, PrefetchWasted: l}
	}
	if _, err := Encode(big); err == nil || !strings.Contains(err.Error(), "limit") {
		t.Fatalf("oversized batch encoded: %v", err)
	}
}

func TestSignedAssignment(t *testing.T) {
	pub, priv, err := GenerateSigningKey()
	if err != nil {
		t.Fatal(err)
	}
	a := sampleAssignment(t)
	signed, err := SignAssignment(a, priv)
	if err != nil {
		t.Fatal(err)
	}
	got, err := OpenAssignment(signed, pub)
	if err != nil {
		t.Fatal(err)
	}
	if got.RunID != 42 || got.Token != 7 || len(got.Configs) != 2 {
		t.Fatalf("opened %+v", got)
	}
	if r, tok := PeekAssignment(signed); r != 42 || tok != 7 {
		t.Fatalf("peek = %d %d", r, tok)
	}
	otherPub, _, _ := GenerateSigningKey()
	if _, err := OpenAssignment(signed, otherPub); RejectKind(err) != RejectSignature {
		t.Fatalf("wrong key: %v", err)
	}
	if _, err := OpenAssignment(signed, nil); RejectKind(err) != RejectSignature {
		t.Fatalf("no key: %v", err)
	}
	// Tamper with the token inside the signed payload.
	var sa SignedAssignment
	if err := json.Unmarshal(signed, &sa); err != nil {
		t.Fatal(err)
	}
	sa.Assignment = bytes.Replace(sa.Assignment, []byte(`"token":7`), []byte(`"token":8`), 1)
	tampered, _ := json.Marshal(&sa)
	if _, err := OpenAssignment(tampered, pub); RejectKind(err) != RejectSignature {
		t.Fatalf("tampered: %v", err)
	}
	// Unsigned: an assignment sent bare.
	bare, _ := Encode(a)
	if _, err := OpenAssignment(bare, pub); err == nil {
		t.Fatal("bare assignment accepted")
	}
	// Configs that disagree with the spec are refused.
	a.Configs[0].Key = "made-up"
	if _, err := SignAssignment(a, priv); err == nil || !strings.Contains(err.Error(), "does not match") {
		t.Fatalf("got %v", err)
	}
}

func TestSubjects(t *testing.T) {
	if s := HelloSubject("dev-1"); s != "lesfarm.v1.device.dev-1.hello" {
		t.Fatal(s)
	}
	for _, kind := range []string{KindHello, KindHeartbeat, KindAssign, KindCancel} {
		id, k, err := ParseDeviceSubject(DeviceSubject("dev_2", kind))
		if err != nil || id != "dev_2" || k != kind {
			t.Fatalf("%s: %q %q %v", kind, id, k, err)
		}
	}
	for _, bad := range []string{"lesfarm.v1.device.a.b.hello", "lesfarm.v1.device.*.hello", "lesfarm.v2.device.a.hello", "lesfarm.v1.device.a.reboot", "lesfarm.v1.device."} {
		if _, _, err := ParseDeviceSubject(bad); err == nil {
			t.Errorf("ParseDeviceSubject(%q) accepted", bad)
		}
	}
	if id, err := ParseRunSubject(TelemetrySubject(12)); err != nil || id != 12 {
		t.Fatal(id, err)
	}
	if id, err := ParseRunSubject(ResultSubject(99)); err != nil || id != 99 {
		t.Fatal(id, err)
	}
	for _, bad := range []string{"lesfarm.v1.telemetry.x", "lesfarm.v1.telemetry.-1", "lesfarm.v1.result.0", "foo",
		"lesfarm.v1.telemetry.dev.x", "lesfarm.v1.telemetry.a*.5", "lesfarm.v1.result.a.b.5", "lesfarm.v1.result..5", "lesfarm.v1.telemetry.dev.0"} {
		if _, err := ParseRunSubject(bad); err == nil {
			t.Errorf("ParseRunSubject(%q) accepted", bad)
		}
	}
	for _, tc := range []struct {
		subject, dev string
		run          int64
	}{
		{TelemetrySubject(12), "", 12},
		{ResultSubject(99), "", 99},
		{DeviceTelemetrySubject("dev_2", 12), "dev_2", 12},
		{DeviceResultSubject("123", 7), "123", 7},
	} {
		dev, run, err := ParseDataSubject(tc.subject)
		if err != nil || dev != tc.dev || run != tc.run {
			t.Errorf("ParseDataSubject(%q) = %q, %d, %v; want %q, %d", tc.subject, dev, run, err, tc.dev, tc.run)
		}
	}
	for _, id := range []string{"", "a.b", "a*", "a>", strings.Repeat("x", 65), "a b"} {
		if ValidDeviceID(id) {
			t.Errorf("ValidDeviceID(%q) = true", id)
		}
	}
}

func TestDecodeErrorIsError(t *testing.T) {
	_, err := DecodeCancel([]byte("null"))
	var de *DecodeError
	if !errors.As(err, &de) || de.Type != "cancel" {
		t.Fatalf("got %v", err)
	}
}

func BenchmarkDecodeTelemetry(b *testing.B) {
	data, err := Encode(sampleTelemetry(512))
	if err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(len(data)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := DecodeTelemetry(data); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(512*b.N)/b.Elapsed().Seconds(), "samples/s")
}

// BenchmarkDecodeTelemetryAgent decodes a message of the load test's
// shape: 50 samples with 48 layers of counts each (500 ms at 100 tokens/s
// on a 48-layer MoE).
func BenchmarkDecodeTelemetryAgent(b *testing.B) {
	const n, layers = 50, 48
	m := sampleTelemetry(0)
	for i := range n {
		lc := &LayerCounts{Hits: make([]int32, layers), Misses: make([]int32, layers), PrefetchUsed: make([]int32, layers), PrefetchWasted: make([]int32, layers)}
		for l := range layers {
			lc.Hits[l], lc.Misses[l], lc.PrefetchUsed[l], lc.PrefetchWasted[l] = int32(3+(i+l)%6), int32((i*l)%4), int32((i+2*l)%3), int32((i+l)%2)
		}
		m.Samples = append(m.Samples, Sample{ConfigIndex: 1, Step: i, Phase: PhaseDecode, Pos: 16 + i, Tokens: 1,
			DurationNS: 48e6, StallNS: 11e6, BytesRead: 9 << 20, CacheBytes: 1 << 30, Layers: lc})
	}
	data, err := Encode(m)
	if err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(len(data)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := DecodeTelemetry(data); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(n*b.N)/b.Elapsed().Seconds(), "samples/s")
}
