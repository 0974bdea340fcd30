package api

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"

	"github.com/danielgtaylor/huma/v2"

	"github.com/lesfarm/lesfarm/coordinator/artifact"
	"github.com/lesfarm/lesfarm/coordinator/builds"
	"github.com/lesfarm/lesfarm/coordinator/store"
)

// buildHandler serves the build registry under /v1/builds.
type buildHandler struct {
	st    *store.Store
	files *artifact.Files
	log   *slog.Logger
}

// PushExecutable names an uploaded artifact as a build's executable.
type PushExecutable struct {
	Platform string `json:"platform" pattern:"^[a-z0-9]{1,16}/[a-z0-9]{1,16}$" example:"android/arm64" doc:"GOOS/GOARCH the executable is for; it must be the GOOS/GOARCH of its Go build information."`
	SHA256   string `json:"sha256" pattern:"^[0-9a-f]{64}$" example:"3f2a9c0d4e5b6a7f8091a2b3c4d5e6f708192a3b4c5d6e7f8091a2b3c4d5e6f7" doc:"sha256 of an artifact uploaded with POST /v1/artifacts."`
}

// PushBuildBody registers a build.
type PushBuildBody struct {
	ID          string           `json:"id" minLength:"1" maxLength:"200" pattern:"^[A-Za-z0-9][A-Za-z0-9._-]*$" example:"ci-4812" doc:"Build id: letters, digits, '.', '_' and '-', starting with a letter or digit. Ids starting with embedded- are agents'."`
	Lineage     string           `json:"lineage,omitempty" minLength:"1" maxLength:"200" pattern:"^[A-Za-z0-9][A-Za-z0-9._-]*$" example:"main" doc:"Build lineage (branch): absent means the lineage of after, else main."`
	GitSHA      string           `json:"git_sha,omitempty" minLength:"4" maxLength:"64" pattern:"^[0-9a-f]+$" example:"9813d69" doc:"Git commit the build claims (a prefix is enough); refused when it contradicts the executables' vcs.revision."`
	After       string           `json:"after,omitempty" maxLength:"200" example:"ci-4811" doc:"Place the build right after this build of its lineage instead of last."`
	Executables []PushExecutable `json:"executables" minItems:"1" maxItems:"16" doc:"One executable per platform, each an uploaded artifact."`
}

type pushBuildInput struct {
	Body PushBuildBody
}

type buildOutput struct {
	Status   int
	Location string `header:"Location"`
	Body     *Build
}

// refusal is the one-line 422 of a build or trigger the registry refuses.
func refusal(msg, location string, value any) error {
	return huma.Error422UnprocessableEntity(msg, &huma.ErrorDetail{Location: location, Message: msg, Value: value})
}

// RegisterPush registers POST /v1/builds.
func (h *buildHandler) RegisterPush(api huma.API) {
	huma.Register(api, write(huma.Operation{
		OperationID: "push-build", Method: http.MethodPost, Path: "/v1/builds",
		Summary: "Register a build", Tags: []string{"builds"},
		Description:   "Registers an immutable build from executables already uploaded with POST /v1/artifacts. The coordinator reads each executable's Go build information (without running it) and refuses, with a one-line 422, a file that is not a lesfarm binary (not Go, another module or package, truncated), a GOOS/GOARCH that is not the declared platform, executables of different revisions, a git_sha that contradicts their vcs.revision, and an id already registered with other content. A binary built from a modified tree is accepted and flagged dirty. Returns 201 for a new build and 200 when the same build was already registered. The executables' artifacts are pinned.",
		Errors:        []int{http.StatusUnprocessableEntity, http.StatusServiceUnavailable},
		DefaultStatus: http.StatusCreated,
	}), func(ctx context.Context, in *pushBuildInput) (*buildOutput, error) {
		if h.files == nil {
			return nil, huma.Error503ServiceUnavailable("this coordinator has no artifact store configured")
		}
		body := &in.Body
		if strings.HasPrefix(body.ID, "embedded-") {
			return nil, refusal(`build ids starting with "embedded-" are reserved for agents' embedded builds`, "body.id", body.ID)
		}
		exes := make([]builds.Executable, len(body.Executables))
		stored := make([]store.Executable, len(body.Executables))
		for i, x := range body.Executables {
			info, size, err := h.inspect(ctx, x.SHA256)
			if err != nil {
				var se huma.StatusError
				if errors.As(err, &se) {
					return nil, err
				}
				return nil, refusal(fmt.Sprintf("executable for %s (%s): %v", x.Platform, shortSHA(x.SHA256), err),
					fmt.Sprintf("body.executables[%d].sha256", i), x.SHA256)
			}
			exes[i] = builds.Executable{Platform: x.Platform, SHA256: x.SHA256, Info: info}
			stored[i] = store.Executable{Platform: x.Platform, SHA256: x.SHA256, Size: size, GoVersion: info.GoVersion,
				Revision: info.Revision, Modified: info.Modified, ModulePath: info.Module, MainPath: info.MainPackage, Settings: info.Settings}
		}
		sum, err := builds.Check(body.GitSHA, exes)
		if err != nil {
			return nil, refusal(err.Error(), "body.executables", nil)
		}
		b, created, err := h.st.CreateBuild(ctx, &store.CreateBuildParams{ID: body.ID, Lineage: body.Lineage, After: body.After,
			GitSHA: sum.GitSHA, Dirty: sum.Dirty, PushedBy: tokenName(ctx), Executables: stored})
		var r *store.BuildRefusal
		switch {
		case errors.As(err, &r):
			return nil, refusal(r.Msg, "body.id", body.ID)
		case errors.Is(err, store.ErrBadLineage):
			return nil, lineageProblem(err, body.Lineage)
		case err != nil:
			return nil, storeErr(ctx, h.log, "build", err)
		}
		out := &buildOutput{Status: http.StatusOK, Location: "/v1/builds/" + b.ID, Body: buildPtr(b)}
		if created {
			out.Status = http.StatusCreated
			h.log.InfoContext(ctx, "api: build pushed", "build", b.ID, "lineage", b.Lineage, "position", b.Position,
				"git_sha", b.GitSHA, "dirty", b.Dirty, "executables", len(b.Executables), "pushed_by", b.PushedBy)
		}
		return out, nil
	})
}

// inspect reads the build information of the stored artifact sha and
// returns it with the artifact's size. A refusal (not uploaded, not a
// lesfarm binary) is a plain one-line error; a failure of the store is a
// huma.StatusError.
func (h *buildHandler) inspect(ctx context.Context, sha string) (*builds.Info, int64, error) {
	a, err := h.st.GetArtifact(ctx, sha)
	if errors.Is(err, store.ErrNotFound) {
		return nil, 0, errors.New("no such artifact; upload it first with POST /v1/artifacts (lesfarm build push does)")
	}
	if err != nil {
		return nil, 0, storeErr(ctx, h.log, "artifact", err)
	}
	f, err := h.files.Open(sha)
	if errors.Is(err, artifact.ErrNotFound) {
		return nil, 0, errors.New("the artifact is registered but its file is missing from this coordinator's store; upload it again")
	}
	if err != nil {
		h.log.ErrorContext(ctx, "api: open build executable", "sha256", sha, "err", err)
		return nil, 0, huma.Error500InternalServerError("cannot open the artifact")
	}
	defer f.Close()
	info, err := builds.Inspect(f)
	if err != nil {
		return nil, 0, err
	}
	return info, a.Size, nil
}

func shortSHA(s string) string {
	if len(s) > 12 {
		return s[:12]
	}
	return s
}

type listBuildsInput struct {
	Lineage string `query:"lineage" maxLength:"200" pattern:"^(\\*|[A-Za-z0-9][A-Za-z0-9._-]*)$" doc:"Only this lineage's builds, newest (highest position) first; without it (or with *) every build, most recently pushed first." example:"main"`
	Limit   int    `query:"limit" minimum:"1" maximum:"1000" default:"50" doc:"At most this many builds."`
}

type listBuildsOutput struct {
	Body struct {
		Items []Build `json:"items" doc:"Builds with their executables."`
	}
}

// RegisterList registers GET /v1/builds.
func (h *buildHandler) RegisterList(api huma.API) {
	huma.Register(api, huma.Operation{
		OperationID: "list-builds", Method: http.MethodGet, Path: "/v1/builds",
		Summary: "List builds", Tags: []string{"builds"},
	}, func(ctx context.Context, in *listBuildsInput) (*listBuildsOutput, error) {
		bs, err := h.st.ListBuilds(ctx, &store.ListBuildsParams{Lineage: lineageFilter(in.Lineage), Limit: in.Limit})
		if err != nil {
			return nil, storeErr(ctx, h.log, "builds", err)
		}
		out := &listBuildsOutput{}
		out.Body.Items = mapSlice(bs, buildFromStore)
		return out, nil
	})
}

type buildPathInput struct {
	ID string `path:"id" maxLength:"200" doc:"Build id." example:"ci-4812"`
}

type getBuildOutput struct {
	Body *Build
}

// RegisterGet registers GET /v1/builds/{id}.
func (h *buildHandler) RegisterGet(api huma.API) {
	huma.Register(api, huma.Operation{
		OperationID: "get-build", Method: http.MethodGet, Path: "/v1/builds/{id}",
		Summary: "Get a build", Tags: []string{"builds"},
		Description: "The build with its executables (platform, sha256, size, revision, Go version, dirty) and how many runs and regression alert groups it has. An unknown id is a 404 naming the nearest registered ids.",
		Errors:      []int{http.StatusNotFound},
	}, func(ctx context.Context, in *buildPathInput) (*getBuildOutput, error) {
		b, err := h.st.GetBuild(ctx, in.ID)
		if errors.Is(err, store.ErrNotFound) {
			return nil, huma.Error404NotFound(unknownBuild(ctx, h.st, in.ID))
		}
		if err != nil {
			return nil, storeErr(ctx, h.log, "build", err)
		}
		return &getBuildOutput{Body: buildPtr(b)}, nil
	})
}

// nearestShown is how many ids an unknown build's message suggests.
const nearestShown = 3

// unknownBuild says, in one line, that build id is not registered, with
// the nearest registered ids.
func unknownBuild(ctx context.Context, st *store.Store, id string) string {
	near, err := st.NearestBuilds(ctx, id, nearestShown)
	if err != nil || len(near) == 0 {
		return fmt.Sprintf("build %q is not registered; push it first: lesfarm build push %s FILE...", id, id)
	}
	return fmt.Sprintf("build %q is not registered; nearest: %s", id, strings.Join(near, ", "))
}

// requireBuild refuses (422, naming the nearest ids) a trigger of a build
// that is not registered. An empty build is allowed: each device runs its
// embedded build.
func requireBuild(ctx context.Context, st *store.Store, log *slog.Logger, build string) error {
	if build == "" {
		return nil
	}
	_, err := st.GetBuild(ctx, build)
	if errors.Is(err, store.ErrNotFound) {
		return refusal(unknownBuild(ctx, st, build), "body.build", build)
	}
	if err != nil {
		return storeErr(ctx, log, "build", err)
	}
	return nil
}
