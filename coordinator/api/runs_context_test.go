package api

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/lesfarm/lesfarm/coordinator/builds/buildstest"
	"github.com/lesfarm/lesfarm/coordinator/store"
	"github.com/lesfarm/lesfarm/jobs"
	"github.com/lesfarm/lesfarm/protocol"
)

// TestTriggerRefusesSpecBeyondContext is issue 29, finding 3: with the
// model's context known (256), an override whose prompt and decode tokens
// cannot fit is refused at trigger time with 422 naming the field, instead
// of running configs that are all invalid; one that fits is queued.
func TestTriggerRefusesSpecBeyondContext(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := context.Background()
	buildstest.Register(t, e.st, "b1")
	spec, err := jobs.Builtin("smoke")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.st.PutArtifact(ctx, spec.Model.SHA256, int64(spec.Model.Size), spec.Model.Name); err != nil {
		t.Fatal(err)
	}
	if err := e.st.SetArtifactModel(ctx, &store.ArtifactModelParams{SHA256: spec.Model.SHA256,
		Facts: &protocol.ModelFacts{Architecture: "qwen3moe", TensorTypes: []string{"F16"}, ContextLength: 256}}); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		override string
		status   int
		location string
	}{
		{`{"decode_tokens":400}`, http.StatusUnprocessableEntity, "body.override.decode_tokens"},
		{`{"prefill_tokens":250}`, http.StatusUnprocessableEntity, "body.override.prefill_tokens"},
		{`{"decode_tokens":200}`, http.StatusCreated, ""},
		{`{}`, http.StatusCreated, ""},
	} {
		resp := e.do("POST", "/v1/runs", strings.NewReader(`{"suite":"smoke","build":"b1","override":`+c.override+`}`),
			"Authorization", "Bearer "+e.token, "Content-Type", "application/json")
		body, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != c.status {
			t.Fatalf("override %s: status %d, want %d: %s", c.override, resp.StatusCode, c.status, body)
		}
		if c.location == "" {
			continue
		}
		p := decodeProblem(t, resp.Header.Get("Content-Type"), body)
		if len(p.Errors) != 1 || p.Errors[0].Location != c.location || !strings.Contains(p.Errors[0].Message, "context length 256") {
			t.Fatalf("override %s: problem %+v", c.override, p)
		}
	}
}
