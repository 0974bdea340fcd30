package api

import (
	"context"
	"errors"
	"fmt"

	"github.com/danielgtaylor/huma/v2"

	"github.com/lesfarm/lesfarm/coordinator/store"
	"github.com/lesfarm/lesfarm/jobs"
)

// modelProblem refuses, at trigger time, a suite whose model the agents
// would have to fetch from this coordinator (no url and no path) but that
// was never uploaded: every run would otherwise be queued, assigned and
// fail with a 404 on the download. It returns nil when the model has a url
// or path (the agent gets it elsewhere) or its artifact is stored.
func (h *runHandler) modelProblem(ctx context.Context, spec *jobs.Spec) error {
	if !h.requireModel || spec.Model.URL != "" || spec.Model.Path != "" || spec.Model.SHA256 == "" {
		return nil
	}
	_, err := h.st.GetArtifact(ctx, spec.Model.SHA256)
	if errors.Is(err, store.ErrNotFound) {
		name := spec.Model.Name
		if name == "" {
			name = "MODEL.gguf"
		}
		return huma.Error422UnprocessableEntity("the suite's model was never uploaded", &huma.ErrorDetail{
			Location: "body.suite",
			Message: fmt.Sprintf("suite %s needs model %s (sha256 %s), which this coordinator does not have; upload it first: lesfarm artifact add %s, or run the suite on a model you have: lesfarm run --model FILE (lesfarm synth makes one)",
				spec.Suite, name, spec.Model.SHA256, name),
			Value: spec.Suite,
		})
	}
	if err != nil {
		return storeErr(ctx, h.log, "artifact", err)
	}
	return nil
}

// contextProblem refuses, at trigger time, a spec whose prompt and decode
// tokens cannot fit the model's context, when the stored artifact's facts
// know it (protocol.ModelFacts.ContextLength): every config would be
// invalid on every device, and the run would measure nothing (issue 29,
// finding 3). A prompt without prefill_tokens counts as at least one
// token. The 422 names the override's field when the override set it, else
// the suite.
func (h *runHandler) contextProblem(ctx context.Context, spec *jobs.Spec, ov *jobs.Override) error {
	if spec.Model.SHA256 == "" {
		return nil
	}
	facts, _, err := h.st.ArtifactModelFacts(ctx, spec.Model.SHA256)
	if err != nil {
		return storeErr(ctx, h.log, "artifact", err)
	}
	if facts == nil || facts.ContextLength <= 0 {
		return nil
	}
	prompt := max(spec.PrefillTokens, 1)
	if need := prompt + spec.DecodeTokens; need > facts.ContextLength {
		loc, field, value := "body.suite", "decode_tokens", any(spec.Suite)
		switch {
		case ov != nil && ov.DecodeTokens != nil:
			loc, value = "body.override.decode_tokens", *ov.DecodeTokens
		case ov != nil && ov.PrefillTokens != nil:
			loc, field, value = "body.override.prefill_tokens", "prefill_tokens", *ov.PrefillTokens
		}
		return huma.Error422UnprocessableEntity("the spec does not fit the model's context", &huma.ErrorDetail{
			Location: loc,
			Message: fmt.Sprintf("%s: prompt (%d tokens) + decode_tokens (%d) = %d exceeds the context length %d of model %s; lower %s",
				field, prompt, spec.DecodeTokens, need, facts.ContextLength, spec.Model.SHA256[:min(12, len(spec.Model.SHA256))], field),
			Value: value,
		})
	}
	return nil
}
