package protocol

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
)

func sampleFacts() *ModelFacts {
	return &ModelFacts{Architecture: "qwen3moe", MoE: true, ExpertCount: 8, ExpertsUsed: 2, TensorTypes: []string{"F32", "Q4_K"},
		Tensors: 40, TotalBytes: 1000, ExpertBytes: 800, ResidentBytes: 200}
}

// TestAssignmentModelFactsSigned: the facts travel inside the signed bytes
// (tampering breaks the signature), survive a round trip, and an older
// agent's Assignment type (without the field) still decodes the message.
func TestAssignmentModelFactsSigned(t *testing.T) {
	pub, priv, _ := GenerateSigningKey()
	a := sampleAssignment(t)
	a.Model = sampleFacts()
	data, err := SignAssignment(a, priv)
	if err != nil {
		t.Fatal(err)
	}
	got, err := OpenAssignment(data, pub)
	if err != nil {
		t.Fatal(err)
	}
	if got.Model == nil || got.Model.Architecture != "qwen3moe" || got.Model.ExpertBytes != 800 || len(got.Model.TensorTypes) != 2 {
		t.Fatalf("facts after round trip: %+v", got.Model)
	}
	tampered := bytes.Replace(data, []byte("qwen3moe"), []byte("llama4xx"), 1)
	if bytes.Equal(tampered, data) {
		t.Fatal("architecture not found in the signed message")
	}
	if _, err := OpenAssignment(tampered, pub); RejectKind(err) != RejectSignature {
		t.Fatalf("tampered facts: err %v, want a signature rejection", err)
	}
	// An agent built before ModelFacts decodes the same payload.
	var sa SignedAssignment
	if err := json.Unmarshal(data, &sa); err != nil {
		t.Fatal(err)
	}
	var old struct {
		V     int   `json:"v"`
		RunID int64 `json:"run_id"`
	}
	if err := json.Unmarshal(sa.Assignment, &old); err != nil || old.RunID != a.RunID {
		t.Fatalf("old decoder: %+v %v", old, err)
	}
	// Without facts the field is absent, so older coordinators' messages
	// are byte-for-byte what they were.
	a.Model = nil
	plain, _ := Encode(a)
	var top map[string]json.RawMessage
	if err := json.Unmarshal(plain, &top); err != nil {
		t.Fatal(err)
	}
	if _, ok := top["model"]; ok {
		t.Fatalf("nil facts encoded: %s", top["model"])
	}
}

func TestModelFactsValidate(t *testing.T) {
	for _, tc := range []struct {
		name string
		mod  func(f *ModelFacts)
		in   string
	}{
		{"no architecture", func(f *ModelFacts) { f.Architecture = "" }, "architecture"},
		{"long architecture", func(f *ModelFacts) { f.Architecture = strings.Repeat("a", 65) }, "architecture"},
		{"negative bytes", func(f *ModelFacts) { f.ExpertBytes = -1 }, "byte counts"},
		{"experts over total", func(f *ModelFacts) { f.ExpertBytes = 2000 }, "byte counts"},
		{"too many types", func(f *ModelFacts) { f.TensorTypes = make([]string, 65) }, "tensor types"},
		{"empty type", func(f *ModelFacts) { f.TensorTypes = []string{""} }, "tensor type"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := sampleAssignment(t)
			a.Model = sampleFacts()
			tc.mod(a.Model)
			_, err := Encode(a)
			if err == nil || !strings.Contains(err.Error(), tc.in) {
				t.Fatalf("err %v, want one mentioning %q", err, tc.in)
			}
		})
	}
}
