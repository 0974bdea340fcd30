package protocol

import (
	"errors"
	"strings"
	"testing"
)

func TestMsgIDRoundTrip(t *testing.T) {
	n := NewMsgNonce()
	if len(n) != 16 || n == NewMsgNonce() {
		t.Fatalf("nonce %q: want 16 hex digits, different each time", n)
	}
	r, err := ParseMsgID(ResultMsgID("dev-1", 7, 12, n))
	if err != nil || *r != (MsgID{Kind: MsgIDResult, DeviceID: "dev-1", RunID: 7, Token: 12, Nonce: n}) {
		t.Fatalf("result id: %+v, %v", r, err)
	}
	tm, err := ParseMsgID(TelemetryMsgID("dev-1", 7, 12, 3, n))
	if err != nil || *tm != (MsgID{Kind: MsgIDTelemetry, DeviceID: "dev-1", RunID: 7, Token: 12, Seq: 3, Nonce: n}) {
		t.Fatalf("telemetry id: %+v, %v", tm, err)
	}
	renewed := RenewMsgID(TelemetryMsgID("dev-1", 7, 12, 3, n))
	if m, err := ParseMsgID(renewed); err != nil || m.Nonce == n || m.Seq != 3 || m.DeviceID != "dev-1" {
		t.Fatalf("renewed %q: %+v, %v", renewed, m, err)
	}
}

func TestCheckDataMsgID(t *testing.T) {
	const n = "0123456789abcdef"
	sub := DeviceTelemetrySubject("victim", 7)
	for _, c := range []struct {
		name, typ, id, subject, device string
		token                          int64
		seq                            uint64
		ok                             bool
	}{
		{"no id", "telemetry", "", sub, "victim", 12, 3, true},
		{"own id", "telemetry", TelemetryMsgID("victim", 7, 12, 3, n), sub, "victim", 12, 3, true},
		{"result id", "result", ResultMsgID("victim", 7, 12, n), DeviceResultSubject("victim", 7), "victim", 12, 0, true},
		{"run-only subject", "telemetry", TelemetryMsgID("victim", 7, 12, 3, n), TelemetrySubject(7), "victim", 12, 3, true},
		// The attack: the hostile device's own subject carrying the victim's id.
		{"another device's id", "telemetry", TelemetryMsgID("victim", 7, 12, 3, n), DeviceTelemetrySubject("hostile", 7), "hostile", 12, 3, false},
		{"id names another device than the body", "telemetry", TelemetryMsgID("victim", 7, 12, 3, n), TelemetrySubject(7), "hostile", 12, 3, false},
		{"legacy unscoped id", "telemetry", "t/7/12/3", sub, "victim", 12, 3, false},
		{"legacy result id", "result", "r/7/12", DeviceResultSubject("victim", 7), "victim", 12, 0, false},
		{"other run", "telemetry", TelemetryMsgID("victim", 8, 12, 3, n), sub, "victim", 12, 3, false},
		{"other token", "telemetry", TelemetryMsgID("victim", 7, 13, 3, n), sub, "victim", 12, 3, false},
		{"other seq", "telemetry", TelemetryMsgID("victim", 7, 12, 4, n), sub, "victim", 12, 3, false},
		{"result id on telemetry", "telemetry", ResultMsgID("victim", 7, 12, n), sub, "victim", 12, 3, false},
		{"bad nonce", "telemetry", "t/victim/7/12/3/XYZ", sub, "victim", 12, 3, false},
		{"no nonce", "result", "r/victim/7/12/", DeviceResultSubject("victim", 7), "victim", 12, 0, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			err := CheckDataMsgID(c.typ, c.id, c.subject, c.device, 7, c.token, c.seq)
			if (err == nil) != c.ok {
				t.Fatalf("CheckDataMsgID(%q on %s) = %v, want ok=%v", c.id, c.subject, err, c.ok)
			}
			if err != nil && (!errors.Is(err, ErrMsgIDMismatch) || RejectKind(err) != RejectInvalid) {
				t.Fatalf("error %v is not an invalid msg id rejection", err)
			}
		})
	}
}

func FuzzParseMsgID(f *testing.F) {
	f.Add(TelemetryMsgID("d", 1, 2, 3, "0123456789abcdef"))
	f.Add(ResultMsgID("d", 1, 2, "0123456789abcdef"))
	f.Add("t/7/1/0")
	f.Fuzz(func(t *testing.T, id string) {
		m, err := ParseMsgID(id)
		if err != nil {
			return
		}
		again := ResultMsgID(m.DeviceID, m.RunID, m.Token, m.Nonce)
		if m.Kind == MsgIDTelemetry {
			again = TelemetryMsgID(m.DeviceID, m.RunID, m.Token, m.Seq, m.Nonce)
		}
		if m2, err := ParseMsgID(again); err != nil || *m2 != *m || strings.Count(again, "/") != strings.Count(id, "/") {
			t.Fatalf("%q parsed to %+v, re-formatted %q: %+v %v", id, m, again, m2, err)
		}
	})
}
