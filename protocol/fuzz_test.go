package protocol

import (
	"bytes"
	"testing"
)

// fuzzType runs the decoder of m's type on arbitrary input: it must never
// panic, every error must be a *DecodeError, and anything accepted must
// re-encode to bytes that decode to the same encoding (a fixed point).
func fuzzType(f *testing.F, m Message) {
	f.Helper()
	for _, s := range allSamples(f) {
		if s.MessageType() == m.MessageType() {
			b, err := Encode(s)
			if err != nil {
				f.Fatal(err)
			}
			f.Add(b)
		}
	}
	f.Add([]byte(`{"v":1}`))
	f.Add([]byte(`{"v":2}`))
	f.Add([]byte(`null`))
	f.Add([]byte(`[]`))
	f.Fuzz(func(t *testing.T, data []byte) {
		got, err := decodeAny(m, data)
		if err != nil {
			if RejectKind(err) == "" {
				t.Fatalf("error is not a *DecodeError: %v", err)
			}
			return
		}
		b1, err := Encode(got)
		if err != nil {
			return // e.g. HTML escaping grew the message past its limit
		}
		again, err := decodeAny(m, b1)
		if err != nil {
			t.Fatalf("re-encoded message rejected: %v\n%s", err, b1)
		}
		b2, err := Encode(again)
		if err != nil || !bytes.Equal(b1, b2) {
			t.Fatalf("encoding is not a fixed point: %v\n%s\n%s", err, b1, b2)
		}
	})
}

func FuzzHello(f *testing.F)            { fuzzType(f, &Hello{}) }
func FuzzHelloReply(f *testing.F)       { fuzzType(f, &HelloReply{}) }
func FuzzHeartbeat(f *testing.F)        { fuzzType(f, &Heartbeat{}) }
func FuzzHeartbeatReply(f *testing.F)   { fuzzType(f, &HeartbeatReply{}) }
func FuzzAssignment(f *testing.F)       { fuzzType(f, &Assignment{}) }
func FuzzSignedAssignment(f *testing.F) { fuzzType(f, &SignedAssignment{}) }
func FuzzAssignReply(f *testing.F)      { fuzzType(f, &AssignReply{}) }
func FuzzCancel(f *testing.F)           { fuzzType(f, &Cancel{}) }
func FuzzCancelReply(f *testing.F)      { fuzzType(f, &CancelReply{}) }
func FuzzTelemetry(f *testing.F)        { fuzzType(f, &TelemetryBatch{}) }
func FuzzResult(f *testing.F)           { fuzzType(f, &Result{}) }

// FuzzParseDataSubject checks that a telemetry/result subject either parses
// into a valid device id (or none) and a positive run id that format back to
// the same subject, or is rejected.
func FuzzParseDataSubject(f *testing.F) {
	for _, s := range []string{TelemetrySubject(1), ResultSubject(42), DeviceTelemetrySubject("dev-1", 3), DeviceResultSubject("x", 9),
		"lesfarm.v1.telemetry.a.b.3", "lesfarm.v1.result..1", "lesfarm.v1.telemetry.", "lesfarm.v1.telemetry.dev.+5"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		dev, run, err := ParseDataSubject(s)
		if err != nil {
			return
		}
		if run <= 0 || (dev != "" && !ValidDeviceID(dev)) {
			t.Fatalf("ParseDataSubject(%q) = %q, %d", s, dev, run)
		}
	})
}
