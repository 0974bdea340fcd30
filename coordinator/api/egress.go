package api

import (
	"context"
	"log/slog"
	"net/http"
	"slices"
	"strconv"

	"github.com/danielgtaylor/huma/v2"

	"github.com/lesfarm/lesfarm/coordinator/store"
	"github.com/lesfarm/lesfarm/jobs"
)

// egressPolicy decides which model URLs suites may name (issue 29,
// finding 8; jobs/egress.go): the coordinator's own artifact URL's host,
// and the hosts an admin put on the allow-list. It is safe for concurrent
// use.
type egressPolicy struct {
	st *store.Store
	// artifactURL is the coordinator's --artifact-url ("" when it has
	// none: only the allow-list then counts).
	artifactURL string
	log         *slog.Logger
}

// allowed returns the allow-list entries in force: the artifact URL's
// origin, then the admin's hosts.
func (p *egressPolicy) allowed(ctx context.Context) ([]string, error) {
	hosts, err := p.st.EgressHosts(ctx)
	if err != nil {
		return nil, err
	}
	if p.artifactURL != "" {
		if o := jobs.EgressOrigin(p.artifactURL); o != "" {
			hosts = append([]string{o}, hosts...)
		}
	}
	return hosts, nil
}

// check returns nil when spec's model needs no fetch from elsewhere (no
// url) or its url is allowed, else a 422 naming loc (the field that holds
// the url, e.g. body.spec.model.url).
func (p *egressPolicy) check(ctx context.Context, spec *jobs.Spec, loc string) error {
	if p == nil || spec.Model.URL == "" {
		return nil
	}
	hosts, err := p.allowed(ctx)
	if err != nil {
		return storeErr(ctx, p.log, "egress allow-list", err)
	}
	if err := jobs.CheckEgress(spec.Model.URL, hosts); err != nil {
		return huma.Error422UnprocessableEntity("model.url is not an allowed download source", &huma.ErrorDetail{
			Location: loc, Message: err.Error(), Value: spec.Model.URL,
		})
	}
	return nil
}

// egressHandler serves the allow-list at /v1/egress.
type egressHandler struct {
	policy *egressPolicy
	log    *slog.Logger
}

// Egress is the download allow-list of the farm.
type Egress struct {
	ArtifactHost string   `json:"artifact_host,omitempty" doc:"The coordinator's own artifact host (from serve --artifact-url), always allowed." example:"farm.lab:8443"`
	Hosts        []string `json:"hosts" doc:"Further hosts a suite's model.url may name: HOST (any port) or HOST:PORT. Agents fetch from nowhere else." example:"[\"models.lab\",\"mirror.lab:8080\"]"`
}

type egressOutput struct {
	Body *Egress
}

type putEgressInput struct {
	Body struct {
		Hosts []string `json:"hosts" maxItems:"256" doc:"The whole allow-list (it replaces the stored one): HOST (any port) or HOST:PORT, no scheme or path. Empty allows the artifact host alone." example:"[\"models.lab\",\"mirror.lab:8080\"]"`
	}
}

func (h *egressHandler) read(ctx context.Context) (*egressOutput, error) {
	hosts, err := h.policy.st.EgressHosts(ctx)
	if err != nil {
		return nil, storeErr(ctx, h.log, "egress allow-list", err)
	}
	out := &egressOutput{Body: &Egress{Hosts: hosts}}
	out.Body.ArtifactHost = jobs.EgressOrigin(h.policy.artifactURL)
	return out, nil
}

// RegisterGet registers GET /v1/egress.
func (h *egressHandler) RegisterGet(api huma.API) {
	huma.Register(api, huma.Operation{
		OperationID: "get-egress", Method: http.MethodGet, Path: "/v1/egress",
		Summary:     "The hosts devices may download models from",
		Description: "A suite's model.url must name the coordinator's artifact host or a host listed here; suites and triggers naming another are refused with 422, and agents refuse to fetch from it.",
		Tags:        []string{"admin"},
	}, func(ctx context.Context, _ *struct{}) (*egressOutput, error) {
		return h.read(ctx)
	})
}

// RegisterPut registers PUT /v1/egress (admin scope).
func (h *egressHandler) RegisterPut(api huma.API) {
	huma.Register(api, write(huma.Operation{
		OperationID: "put-egress", Method: http.MethodPut, Path: "/v1/egress",
		Summary:     "Replace the download allow-list",
		Description: "Sets the hosts a suite's model.url may name besides the coordinator's artifact host. Suites already stored that name a host removed here are refused at their next trigger.",
		Tags:        []string{"admin"},
		Errors:      []int{http.StatusUnprocessableEntity},
	}), func(ctx context.Context, in *putEgressInput) (*egressOutput, error) {
		var hosts []string
		var details []error
		for i, e := range in.Body.Hosts {
			n, err := jobs.NormalizeEgressHost(e)
			if err != nil {
				details = append(details, &huma.ErrorDetail{Location: "body.hosts[" + strconv.Itoa(i) + "]", Message: err.Error(), Value: e})
				continue
			}
			hosts = append(hosts, n)
		}
		if len(details) > 0 {
			return nil, huma.Error422UnprocessableEntity("validation failed", details...)
		}
		slices.Sort(hosts)
		hosts = slices.Compact(hosts)
		if hosts == nil {
			hosts = []string{}
		}
		if err := h.policy.st.SetEgressHosts(ctx, hosts); err != nil {
			return nil, storeErr(ctx, h.log, "egress allow-list", err)
		}
		h.log.InfoContext(ctx, "api: egress allow-list replaced", "hosts", hosts, "token", tokenName(ctx))
		return h.read(ctx)
	})
}

// specLoc is where a suite's spec came from in a request body: the JSON
// object (body.spec) or the YAML/JSON text (body.spec_text).
func specLoc(specText string) string {
	if specText != "" {
		return "body.spec_text"
	}
	return "body.spec"
}
