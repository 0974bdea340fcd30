package api

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/danielgtaylor/huma/v2"
	"github.com/danielgtaylor/huma/v2/adapters/humago"

	"github.com/lesfarm/lesfarm/coordinator/artifact"
	"github.com/lesfarm/lesfarm/coordinator/store"
	"github.com/lesfarm/lesfarm/jobs"
	"github.com/lesfarm/lesfarm/protocol"
)

// artifactHandler serves the content-addressed artifact store under
// /v1/artifacts.
type artifactHandler struct {
	st    *store.Store
	files *artifact.Files
	log   *slog.Logger
	// idle cuts an upload that sends nothing this long (Deps.UploadIdleTimeout).
	idle time.Duration
	// sendIdle cuts a download whose client reads nothing this long
	// (Deps.DownloadIdleTimeout).
	sendIdle time.Duration
}

func (h *artifactHandler) enabled() error {
	if h.files == nil {
		return huma.Error503ServiceUnavailable("this coordinator has no artifact store configured")
	}
	return nil
}

// uploadInput is a streamed upload: the body is not read by huma (there is
// no Body field), Resolve hands the raw reader to the handler.
type uploadInput struct {
	Name   string `query:"name" maxLength:"200" doc:"Human name of the file (e.g. its file name); kept as metadata."`
	SHA256 string `query:"sha256" pattern:"^[0-9a-f]{64}$" doc:"Expected sha256; the upload fails with 422 if the content differs."`

	body   *idleReader
	length int64
}

// DefaultUploadIdleTimeout is how long an upload may send nothing before
// it is cut (408) and its partial file removed (Deps.UploadIdleTimeout):
// the server's read timeout is lifted for uploads, which take minutes, so
// without it a client that stops sending held a partial file for ever
// (issue 29, finding 9).
const DefaultUploadIdleTimeout = 60 * time.Second

// idleReader reads a request body with a deadline renewed before each
// read: a stalled sender fails the read after idle, however long the
// whole upload takes.
type idleReader struct {
	r           io.Reader
	setDeadline func(time.Time) error
	idle        time.Duration
}

func (b *idleReader) Read(p []byte) (int, error) {
	// Renewing fails only on a connection that is gone; its read fails.
	_ = b.setDeadline(time.Now().Add(b.idle))
	return b.r.Read(p)
}

// Resolve captures the request body, to be read under a per-read idle
// deadline (idleReader) instead of the server's whole-request one.
func (u *uploadInput) Resolve(ctx huma.Context) []error {
	u.body = &idleReader{r: ctx.BodyReader(), setDeadline: ctx.SetReadDeadline, idle: DefaultUploadIdleTimeout}
	u.length = -1
	if cl := ctx.Header("Content-Length"); cl != "" {
		if n, err := strconv.ParseInt(cl, 10, 64); err == nil && n >= 0 {
			u.length = n
		}
	}
	return nil
}

// stalled reports whether err is a read that hit its deadline.
func stalled(err error) bool {
	var ne net.Error
	return errors.Is(err, os.ErrDeadlineExceeded) || (errors.As(err, &ne) && ne.Timeout())
}

type artifactOutput struct {
	Location string `header:"Location"`
	Body     *Artifact
}

type artifactUploadOutput struct {
	Status   int
	Location string `header:"Location"`
	Body     *Artifact
}

// RegisterUpload registers POST /v1/artifacts: a streamed upload of raw
// bytes (application/octet-stream) into the content-addressed store.
func (h *artifactHandler) RegisterUpload(api huma.API) {
	op := write(huma.Operation{
		OperationID: "upload-artifact",
		Metadata:    map[string]any{"long": true},
		Method:      http.MethodPost,
		Path:        "/v1/artifacts",
		Summary:     "Upload an artifact (streamed)",
		Description: "Streams the request body into the content-addressed store without buffering it. For GGUF content the header (only the header) is then read and the model's facts (architecture, tensor types, resident and expert bytes, packed) are returned in `model` and sent to agents with each assignment. Returns 201 with the artifact's metadata, or 200 when identical content was already stored (its first name is kept: a later upload's name does not rename it). Fails with 413 above the size cap, 422 when `sha256` is given and differs, 507 when the coordinator's disk would keep less than its reserve (checked before reading when Content-Length is given), and 408 when the client sends nothing for a minute; a failed upload leaves no partial file.",
		Tags:        []string{"artifacts"},
		Errors:      []int{http.StatusRequestTimeout, http.StatusRequestEntityTooLarge, http.StatusUnprocessableEntity, http.StatusServiceUnavailable, http.StatusInsufficientStorage},
		RequestBody: &huma.RequestBody{
			Required: true,
			Content: map[string]*huma.MediaType{
				"application/octet-stream": {Schema: &huma.Schema{Type: "string", Format: "binary"}},
			},
		},
		DefaultStatus: http.StatusCreated,
	})
	huma.Register(api, op, func(ctx context.Context, in *uploadInput) (*artifactUploadOutput, error) {
		if err := h.enabled(); err != nil {
			return nil, err
		}
		in.body.idle = h.idle
		if in.length > h.files.MaxSize() {
			return nil, huma.Error413RequestEntityTooLarge(sizeCapMsg(h.files.MaxSize()))
		}
		info, err := h.files.Put(in.body, artifact.PutOptions{SHA256: in.SHA256, Size: in.length})
		switch {
		case errors.Is(err, artifact.ErrTooLarge):
			return nil, huma.Error413RequestEntityTooLarge(sizeCapMsg(h.files.MaxSize()))
		case errors.Is(err, artifact.ErrDigestMismatch):
			return nil, huma.Error422UnprocessableEntity("content does not match the expected sha256", &huma.ErrorDetail{
				Location: "query.sha256", Message: err.Error(), Value: in.SHA256,
			})
		case errors.Is(err, artifact.ErrNoSpace):
			h.log.WarnContext(ctx, "api: artifact upload refused: disk space", "err", err)
			return nil, huma.NewError(http.StatusInsufficientStorage, "the coordinator has not enough free disk space for this upload; free space or raise the disk, then retry")
		case stalled(err):
			h.log.WarnContext(ctx, "api: artifact upload stalled, cut", "idle", h.idle.String())
			return nil, huma.NewError(http.StatusRequestTimeout, "the upload sent nothing for "+h.idle.String()+"; its partial file was removed")
		case errors.Is(err, artifact.ErrSizeMismatch):
			return nil, huma.Error400BadRequest("body shorter or longer than Content-Length", &huma.ErrorDetail{
				Location: "header.Content-Length", Message: err.Error(), Value: in.length,
			})
		case err != nil:
			if ctx.Err() != nil {
				return nil, huma.NewError(499, "upload cancelled by the client")
			}
			h.log.ErrorContext(ctx, "api: artifact upload failed", "err", err)
			return nil, huma.Error500InternalServerError("storing the upload failed")
		}
		a, err := h.st.PutArtifact(ctx, info.SHA256, info.Size, in.Name)
		if err != nil {
			return nil, storeErr(ctx, h.log, "artifact", err)
		}
		if info.Created || a.ModelCheckedAt == nil {
			// Read the GGUF header (only the header) so assignments can
			// carry the model's facts. A failure here does not fail the
			// upload: the artifact simply has no facts.
			facts, err := artifact.RecordModelFacts(ctx, h.st, h.files, a.SHA256)
			if err != nil {
				h.log.WarnContext(ctx, "api: artifact model facts not recorded", "sha256", a.SHA256, "err", err)
			} else if b, err := h.st.GetArtifact(ctx, a.SHA256); err == nil {
				a = b
			} else {
				a.Model = facts
			}
		}
		h.log.InfoContext(ctx, "api: artifact stored", "sha256", a.SHA256, "size", a.Size, "new", info.Created,
			"architecture", archOf(a.Model), "model_error", a.ModelError)
		out := &artifactUploadOutput{Status: http.StatusOK, Location: "/v1/artifacts/" + a.SHA256, Body: artifactPtr(a)}
		if info.Created {
			out.Status = http.StatusCreated
		}
		return out, nil
	})
}

func archOf(f *protocol.ModelFacts) string {
	if f == nil {
		return ""
	}
	return f.Architecture
}

func sizeCapMsg(limit int64) string {
	return "artifact larger than the size cap of " + strconv.FormatInt(limit, 10) + " bytes"
}

type listArtifactsInput struct {
	Cursor string `query:"cursor" doc:"Opaque cursor from the previous page's next_cursor."`
	Limit  int    `query:"limit" minimum:"1" maximum:"1000" default:"100" doc:"Page size."`
}

type listArtifactsOutput struct {
	Body struct {
		Items      []Artifact `json:"items" doc:"Artifacts ordered by digest."`
		NextCursor string     `json:"next_cursor,omitempty" doc:"Pass as cursor to get the next page; absent on the last page." example:"3f2a9c0d4e5b6a7f8091a2b3c4d5e6f708192a3b4c5d6e7f8091a2b3c4d5e6f7"`
	}
}

// RegisterList registers GET /v1/artifacts.
func (h *artifactHandler) RegisterList(api huma.API) {
	huma.Register(api, huma.Operation{
		OperationID: "list-artifacts",
		Method:      http.MethodGet,
		Path:        "/v1/artifacts",
		Summary:     "List artifacts",
		Tags:        []string{"artifacts"},
	}, func(ctx context.Context, in *listArtifactsInput) (*listArtifactsOutput, error) {
		after := ""
		if in.Cursor != "" {
			if !artifact.ValidDigest(in.Cursor) {
				return nil, huma.Error422UnprocessableEntity("bad cursor", &huma.ErrorDetail{Location: "query.cursor", Message: "not a cursor from this API", Value: in.Cursor})
			}
			after = in.Cursor
		}
		items, err := h.st.ListArtifacts(ctx, &store.ListArtifactsParams{After: after, Limit: in.Limit + 1})
		if err != nil {
			return nil, storeErr(ctx, h.log, "artifacts", err)
		}
		out := &listArtifactsOutput{}
		if len(items) > in.Limit {
			items = items[:in.Limit]
			out.Body.NextCursor = items[len(items)-1].SHA256
		}
		out.Body.Items = mapSlice(items, artifactFromStore)
		return out, nil
	})
}

type artifactPathInput struct {
	SHA256 string `path:"sha256" pattern:"^[0-9a-f]{64}$" doc:"The artifact's sha256 (64 lowercase hex digits)."`
}

// RegisterInfo registers GET /v1/artifacts/{sha256}/info: metadata only.
func (h *artifactHandler) RegisterInfo(api huma.API) {
	huma.Register(api, huma.Operation{
		OperationID: "get-artifact-info",
		Method:      http.MethodGet,
		Path:        "/v1/artifacts/{sha256}/info",
		Summary:     "Get an artifact's metadata",
		Tags:        []string{"artifacts"},
	}, func(ctx context.Context, in *artifactPathInput) (*artifactOutput, error) {
		a, err := h.st.GetArtifact(ctx, in.SHA256)
		if err != nil {
			return nil, storeErr(ctx, h.log, "artifact", err)
		}
		return &artifactOutput{Body: artifactPtr(a)}, nil
	})
}

// serveArtifact opens the artifact and returns a streaming response that
// hands the request to http.ServeContent, which implements Range,
// If-Range, If-None-Match and HEAD.
func (h *artifactHandler) serveArtifact(ctx context.Context, sha string) (*huma.StreamResponse, error) {
	if err := h.enabled(); err != nil {
		return nil, err
	}
	a, err := h.st.GetArtifact(ctx, sha)
	if err != nil {
		return nil, storeErr(ctx, h.log, "artifact", err)
	}
	f, err := h.files.Open(sha)
	if errors.Is(err, artifact.ErrNotFound) {
		return nil, huma.Error404NotFound("artifact is registered but its file is missing from this coordinator's store")
	}
	if err != nil {
		h.log.ErrorContext(ctx, "api: open artifact", "sha256", sha, "err", err)
		return nil, huma.Error500InternalServerError("cannot open the artifact")
	}
	if err := h.st.TouchArtifact(ctx, sha); err != nil {
		h.log.WarnContext(ctx, "api: touch artifact", "sha256", sha, "err", err)
	}
	return &huma.StreamResponse{Body: func(hctx huma.Context) {
		defer f.Close()
		r, w := humago.Unwrap(hctx)
		// Model files take minutes to send: instead of the server's write
		// timeout, each write has Deps.DownloadIdleTimeout, so a client
		// that stops reading is cut (issue 29, finding 12) however long a
		// download that moves takes.
		w = &idleWriter{ResponseWriter: w, rc: http.NewResponseController(w), idle: h.sendIdle}
		w.Header().Set("Content-Type", "application/octet-stream")
		w.Header().Set("ETag", `"`+sha+`"`)
		w.Header().Set("Cache-Control", "public, max-age=31536000, immutable")
		w.Header().Set("X-Content-SHA256", sha)
		if !dropZeroSuffixRanges(r) {
			// Every range asks for the last 0 bytes: nothing to send (RFC 9110 §14.1.1).
			w.Header().Set("Content-Range", "bytes */"+strconv.FormatInt(a.Size, 10))
			http.Error(w, "requested range not satisfiable", http.StatusRequestedRangeNotSatisfiable)
			return
		}
		http.ServeContent(w, r, "", a.CreatedAt, f)
	}}, nil
}

// DefaultDownloadIdleTimeout is how long an artifact download may stall
// (the client reading nothing) before the connection is cut
// (Deps.DownloadIdleTimeout).
const DefaultDownloadIdleTimeout = 60 * time.Second

// idleWriter renews the connection's write deadline before each write.
type idleWriter struct {
	http.ResponseWriter
	rc   *http.ResponseController
	idle time.Duration
}

func (w *idleWriter) Write(p []byte) (int, error) {
	_ = w.rc.SetWriteDeadline(time.Now().Add(w.idle))
	return w.ResponseWriter.Write(p)
}

// dropZeroSuffixRanges removes the ranges "-0" (the last zero bytes, which
// RFC 9110 makes unsatisfiable and http.ServeContent answered with an
// empty 206) from r's Range header. It returns false when the header had
// only such ranges: the request is then 416.
func dropZeroSuffixRanges(r *http.Request) bool {
	spec, ok := strings.CutPrefix(r.Header.Get("Range"), "bytes=")
	if !ok {
		return true
	}
	var keep []string
	for _, rg := range strings.Split(spec, ",") {
		if rg = strings.TrimSpace(rg); rg != "" && strings.TrimLeft(rg, "-0") == "" && strings.HasPrefix(rg, "-") {
			continue // "-0", "-00", ...
		}
		keep = append(keep, rg)
	}
	if len(keep) == 0 {
		return false
	}
	r.Header.Set("Range", "bytes="+strings.Join(keep, ","))
	return true
}

// RegisterDownload registers GET /v1/artifacts/{sha256}: the bytes, with
// HTTP Range support so agents resume interrupted downloads.
func (h *artifactHandler) RegisterDownload(api huma.API) {
	huma.Register(api, huma.Operation{
		OperationID: "download-artifact",
		Method:      http.MethodGet,
		Path:        "/v1/artifacts/{sha256}",
		Summary:     "Download an artifact (supports Range)",
		Description: "Serves the file with `Accept-Ranges: bytes`; send `Range: bytes=N-` to resume. The ETag is the quoted sha256, so `If-Range` works.",
		Tags:        []string{"artifacts"},
		Metadata:    map[string]any{"stream": true},
		Responses: map[string]*huma.Response{
			"200": {Description: "The whole file", Content: map[string]*huma.MediaType{"application/octet-stream": {Schema: &huma.Schema{Type: "string", Format: "binary"}}}},
			"206": {Description: "The requested range", Content: map[string]*huma.MediaType{"application/octet-stream": {Schema: &huma.Schema{Type: "string", Format: "binary"}}}},
		},
		Errors: []int{http.StatusNotFound, http.StatusRequestedRangeNotSatisfiable},
	}, func(ctx context.Context, in *artifactPathInput) (*huma.StreamResponse, error) {
		return h.serveArtifact(ctx, in.SHA256)
	})
}

// RegisterHead registers HEAD /v1/artifacts/{sha256}: size and ETag only.
func (h *artifactHandler) RegisterHead(api huma.API) {
	huma.Register(api, huma.Operation{
		OperationID: "head-artifact",
		Method:      http.MethodHead,
		Path:        "/v1/artifacts/{sha256}",
		Summary:     "Check an artifact's presence and size",
		Tags:        []string{"artifacts"},
		Metadata:    map[string]any{"stream": true},
	}, func(ctx context.Context, in *artifactPathInput) (*huma.StreamResponse, error) {
		return h.serveArtifact(ctx, in.SHA256)
	})
}

// RegisterDelete registers DELETE /v1/artifacts/{sha256}.
func (h *artifactHandler) RegisterDelete(api huma.API) {
	huma.Register(api, write(huma.Operation{
		OperationID:   "delete-artifact",
		Method:        http.MethodDelete,
		Path:          "/v1/artifacts/{sha256}",
		Summary:       "Delete an artifact",
		Description:   "Removes the artifact even if jobs still reference it; prefer the garbage collector.",
		Tags:          []string{"artifacts"},
		DefaultStatus: http.StatusNoContent,
	}), func(ctx context.Context, in *artifactPathInput) (*struct{}, error) {
		if err := h.enabled(); err != nil {
			return nil, err
		}
		if err := h.st.DeleteArtifact(ctx, in.SHA256); err != nil {
			return nil, storeErr(ctx, h.log, "artifact", err)
		}
		if err := h.files.Remove(in.SHA256); err != nil {
			h.log.ErrorContext(ctx, "api: remove artifact file", "sha256", in.SHA256, "err", err)
		}
		return nil, nil
	})
}

type pinInput struct {
	SHA256 string `path:"sha256" pattern:"^[0-9a-f]{64}$"`
	Body   struct {
		Pinned bool `json:"pinned" example:"true" doc:"Pinned artifacts are never garbage-collected."`
	}
}

// RegisterPin registers PUT /v1/artifacts/{sha256}/pin.
func (h *artifactHandler) RegisterPin(api huma.API) {
	huma.Register(api, write(huma.Operation{
		OperationID: "pin-artifact", Method: http.MethodPut, Path: "/v1/artifacts/{sha256}/pin",
		Summary: "Pin or unpin an artifact", Tags: []string{"artifacts"},
	}), func(ctx context.Context, in *pinInput) (*artifactOutput, error) {
		a, err := h.st.SetArtifactPinned(ctx, in.SHA256, in.Body.Pinned)
		if err != nil {
			return nil, storeErr(ctx, h.log, "artifact", err)
		}
		return &artifactOutput{Body: artifactPtr(a)}, nil
	})
}

type gcInput struct {
	Body struct {
		Grace        *jobs.Duration `json:"grace,omitempty" example:"24h" doc:"Keep artifacts used or uploaded within this long (default 24h; 0s keeps nothing by age). A Go duration string (a bare number such as \"3600\" is read as seconds)."`
		GraceSeconds *int           `json:"grace_seconds,omitempty" minimum:"0" deprecated:"true" example:"86400" doc:"Deprecated: use grace. The grace period in seconds; ignored when grace is given."`
		DryRun       bool           `json:"dry_run,omitempty" example:"true" doc:"Only report what would be removed."`
	}
}

type gcOutput struct {
	Body *GCReport
}

// RegisterGC registers POST /v1/artifacts/gc: remove unreferenced artifacts.
func (h *artifactHandler) RegisterGC(api huma.API) {
	huma.Register(api, write(huma.Operation{
		OperationID: "gc-artifacts",
		Method:      http.MethodPost,
		Path:        "/v1/artifacts/gc",
		Summary:     "Garbage-collect unreferenced artifacts",
		Description: "Removes artifacts that no job spec or unfinished run references, that are not pinned, and that were not uploaded or downloaded within the grace period; also removes stray files and abandoned partial uploads.",
		Tags:        []string{"artifacts"},
	}), func(ctx context.Context, in *gcInput) (*gcOutput, error) {
		if err := h.enabled(); err != nil {
			return nil, err
		}
		grace := 24 * time.Hour
		switch {
		case in.Body.Grace != nil:
			if in.Body.Grace.D() < 0 {
				return nil, huma.Error422UnprocessableEntity("validation failed", &huma.ErrorDetail{Location: "body.grace", Message: "must not be negative", Value: in.Body.Grace.String()})
			}
			grace = max(in.Body.Grace.D(), time.Nanosecond) // 0 means none, not the default
		case in.Body.GraceSeconds != nil:
			grace = max(time.Duration(*in.Body.GraceSeconds)*time.Second, time.Nanosecond)
		}
		rep, err := artifact.GC(ctx, h.st, h.files, artifact.GCOptions{
			Grace:  grace,
			DryRun: in.Body.DryRun,
			Logger: h.log,
		})
		if err != nil {
			return nil, storeErr(ctx, h.log, "artifact gc", err)
		}
		return &gcOutput{Body: gcReportFromArtifact(rep)}, nil
	})
}

// nonNil returns s, or an empty slice for nil, so lists encode as [].
func nonNil[T any](s []T) []T {
	if s == nil {
		return []T{}
	}
	return s
}
