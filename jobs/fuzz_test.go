package jobs

import (
	"encoding/json"
	"errors"
	"reflect"
	"testing"
)

// FuzzParse feeds arbitrary documents to Parse: it must never panic, errors
// must be *ValidationError, and every accepted spec must survive a canonical
// JSON round trip unchanged and expand within the config limit.
func FuzzParse(f *testing.F) {
	f.Add([]byte(validYAML), uint8(0))
	for _, n := range BuiltinNames() {
		src, _ := BuiltinSource(n)
		f.Add(src, uint8(1))
	}
	f.Add([]byte(`{"name":"x","model":{"sha256":"1b29724f7e45a176e7bdee3a70502a8d834507b307c7bb9f65759ff5b49b4e14","size":1},"prompts":{"set":"kjv"},"matrix":{"modes":["resident"]}}`), uint8(2))
	f.Add([]byte("name: &a x\nsuite: *a\n"), uint8(0))
	f.Add([]byte("matrix: {modes: [on-demand], budgets: [1e308, -1, 0.0]}"), uint8(0))
	f.Add([]byte("{\"a\":"), uint8(2))
	f.Fuzz(func(t *testing.T, data []byte, fmtSel uint8) {
		s, err := Parse(data, Format(fmtSel%3))
		if err != nil {
			if ve := (*ValidationError)(nil); !errors.As(err, &ve) {
				t.Fatalf("error %T is not *ValidationError: %v", err, err)
			}
			_ = err.Error()
			return
		}
		cfgs := s.Expand()
		if len(cfgs) == 0 || len(cfgs) > MaxConfigs {
			t.Fatalf("accepted spec expands to %d configs", len(cfgs))
		}
		js, err := s.MarshalCanonical()
		if err != nil {
			t.Fatalf("marshal accepted spec: %v", err)
		}
		s2, err := Parse(js, FormatJSON)
		if err != nil {
			t.Fatalf("canonical JSON of an accepted spec is rejected: %v\n%s", err, js)
		}
		if !reflect.DeepEqual(s, s2) {
			t.Fatalf("round trip changed the spec:\n%s", js)
		}
		var s3 Spec
		if err := json.Unmarshal(js, &s3); err != nil || !reflect.DeepEqual(s, &s3) {
			t.Fatalf("encoding/json disagrees: %v", err)
		}
	})
}
