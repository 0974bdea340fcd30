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
			Message: fmt.Sprintf("suite %s needs model %s (sha256 %s), which this coordinator does not have; upload it first: lesfarm artifact add %s",
				spec.Suite, name, spec.Model.SHA256, name),
			Value: spec.Suite,
		})
	}
	if err != nil {
		return storeErr(ctx, h.log, "artifact", err)
	}
	return nil
}
