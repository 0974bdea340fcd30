package protocol

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
)

// scanSeeds are wire forms scanTelemetry reads and ones it must leave to
// encoding/json.
func scanSeeds(f *testing.F) {
	for _, n := range []int{0, 1, 7} {
		b, err := Encode(sampleTelemetry(n))
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	for _, s := range []string{
		`{"v":1,"run_id":5,"token":9,"device_id":"dev-1","seq":3,"samples":{"n":0,"enc":"varint-rows-v1","data":""},"sent_at":"2026-01-02T03:04:05.5Z"}`,
		`{ "v" : 1 , "run_id" : -5 , "sent_at" : "2026-01-02T03:04:05+02:00" }`,
		`{"v":1,"V":2}`, `{"v":1,"v":2}`, `{"v":1.0}`, `{"v":1e3}`, `{"v":01}`, `{"v":-}`, `{"seq":-1}`, `{"seq":18446744073709551616}`,
		`{"device_id":"a\"b"}`, `{"device_id":"é"}`, `{"samples":null}`, `{"samples":{"data":"!!"}}`, `{"samples":{"data":"QQ=="}}`,
		`{"progress":{"phase":"x","done":2,"total":3,"message":"m"}}`, `{"progress":{"phase":"x","phase":"y"}}`, `{"experts":{"n":1,"enc":"e","data":"AA=="}}`, `{"v":1} x`, `{"v":1,}`, `{}`, `null`, `[]`, `{"sent_at":"yesterday"}`, `{"unknown":1}`,
	} {
		f.Add([]byte(s))
	}
}

// FuzzTelemetryScan: whenever scanTelemetry reads a message, encoding/json
// reads it too and gives the very same wire form.
func FuzzTelemetryScan(f *testing.F) {
	scanSeeds(f)
	f.Fuzz(func(t *testing.T, data []byte) {
		var fast telemetryWire
		if !scanTelemetry(data, &fast) {
			return
		}
		var slow telemetryWire
		if err := json.Unmarshal(data, &slow); err != nil {
			t.Fatalf("scanned, but encoding/json rejects it: %v\n%q", err, data)
		}
		if !reflect.DeepEqual(fast, slow) {
			t.Fatalf("scan and encoding/json differ on %q:\n%+v\n%+v", data, fast, slow)
		}
	})
}

// TestScanTelemetryTakesAgentMessages: what agents send (and the load
// test's batches) takes the one-pass path, and decodes as before.
func TestScanTelemetryTakesAgentMessages(t *testing.T) {
	b := sampleTelemetry(50)
	b.Progress = &Progress{Phase: "config", Done: 1, Total: 3, Message: "cfg-a"}
	data, err := Encode(b)
	if err != nil {
		t.Fatal(err)
	}
	var w telemetryWire
	if !scanTelemetry(data, &w) {
		t.Fatalf("an agent's batch fell back to encoding/json:\n%.300s", data)
	}
	got, err := DecodeTelemetry(data)
	if err != nil {
		t.Fatal(err)
	}
	var want TelemetryBatch
	if err := json.Unmarshal(data, &want); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, &want) || len(got.Samples) != 50 {
		t.Fatalf("decoded batch differs from encoding/json's")
	}
	for _, s := range []string{`{"v":1,"progress":{"x":1}}`, `{"v":1,"V":1}`, `{"v":1.5}`, `{"device_id":"\u0041"}`} {
		if scanTelemetry([]byte(s), &telemetryWire{}) {
			t.Errorf("%s: scanned instead of left to encoding/json", s)
		}
	}
	// Errors are encoding/json's, from the fallback.
	_, err = DecodeTelemetry([]byte(`{"v":1,"run_id":"x"}`))
	if err == nil || !strings.Contains(err.Error(), "cannot unmarshal") {
		t.Fatalf("err %v", err)
	}
}
