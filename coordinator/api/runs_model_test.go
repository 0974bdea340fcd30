package api

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/lesfarm/lesfarm/coordinator/builds/buildstest"
	"github.com/lesfarm/lesfarm/jobs"
)

// TestTriggerRefusesModelNeverUploaded: with RequireModelArtifacts, a
// suite whose model this coordinator does not have is refused at trigger
// time (422 problem+json with the 'lesfarm artifact add' hint), not queued
// to fail on every device; once the artifact is stored the check passes.
func TestTriggerRefusesModelNeverUploaded(t *testing.T) {
	e := newEnv(t, func(d *Deps) { d.RequireModelArtifacts = true })
	buildstest.Register(t, e.st, "b1")
	trigger := func() (*http.Response, []byte) {
		resp := e.do("POST", "/v1/runs", strings.NewReader(`{"suite":"smoke","build":"b1"}`), "Authorization", "Bearer "+e.token, "Content-Type", "application/json")
		body, _ := io.ReadAll(resp.Body)
		return resp, body
	}
	resp, body := trigger()
	if resp.StatusCode != http.StatusUnprocessableEntity {
		t.Fatalf("status %d, want 422: %s", resp.StatusCode, body)
	}
	p := decodeProblem(t, resp.Header.Get("Content-Type"), body)
	if len(p.Errors) != 1 || p.Errors[0].Location != "body.suite" || !strings.Contains(p.Errors[0].Message, "lesfarm artifact add tiny-moe-kjv-f16.gguf") {
		t.Fatalf("problem %+v", p)
	}
	spec, err := jobs.Builtin("smoke")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.st.PutArtifact(context.Background(), spec.Model.SHA256, int64(spec.Model.Size), spec.Model.Name); err != nil {
		t.Fatal(err)
	}
	// Uploaded: the run is queued.
	if resp, body := trigger(); resp.StatusCode != http.StatusCreated {
		t.Fatalf("after upload: status %d, want 201: %s", resp.StatusCode, body)
	}
}
