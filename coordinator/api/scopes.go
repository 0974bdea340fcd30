package api

import (
	"fmt"
	"net/http"
	"slices"
	"strings"

	"github.com/danielgtaylor/huma/v2"

	"github.com/lesfarm/lesfarm/coordinator/store"
)

// Token scopes (issue 29, finding 8; docs/security.md "Token scopes"). Any
// API token used to make devices fetch any URL and run any build: a token
// handed to a dashboard or a CI job that only triggers runs could also
// rewrite suites and push executables. Each operation now needs one scope
// of the token that authenticated it; a token without it gets 403
// problem+json naming the scope.

// opScopes maps each mutation's operation id to the scopes that allow it
// (any one suffices). A mutation missing here needs ScopeAdmin, so a new
// endpoint is closed until someone decides who may call it
// (TestEveryMutationHasAScope lists them). Reads, when the coordinator
// requires a token for them at all, take a token of any scope: every scope
// includes reading, and a token with ScopeRead alone only reads.
var opScopes = map[string][]string{
	// What devices run, and when.
	"trigger-runs": {store.ScopeTrigger},
	"cancel-run":   {store.ScopeTrigger},
	// A bisection queues runs like a trigger (bisect.go).
	"bisect-alert":     {store.ScopeTrigger},
	"cancel-bisection": {store.ScopeTrigger},
	"create-schedule":  {store.ScopeTrigger},
	"update-schedule":  {store.ScopeTrigger},
	"delete-schedule":  {store.ScopeTrigger},
	// Suites name models and their URLs.
	"put-suite":    {store.ScopeSuites},
	"delete-suite": {store.ScopeSuites},
	// Builds are code that devices execute; artifacts are builds'
	// executables and suites' models.
	"push-build":      {store.ScopeBuilds},
	"upload-artifact": {store.ScopeBuilds, store.ScopeSuites},
	// Checking a spec changes nothing: any token may.
	"validate-job": store.AllScopes,
	// The rest is the farm's administration.
	"set-device-labels":  {store.ScopeAdmin},
	"drain-device":       {store.ScopeAdmin},
	"undrain-device":     {store.ScopeAdmin},
	"put-device-profile": {store.ScopeAdmin},
	"delete-artifact":    {store.ScopeAdmin},
	"pin-artifact":       {store.ScopeAdmin},
	"gc-artifacts":       {store.ScopeAdmin},
	"triage-alert":       {store.ScopeAdmin},
	"put-egress":         {store.ScopeAdmin},
}

// scopesFor returns the scopes that allow the operation op with method.
func scopesFor(op *huma.Operation, method string) []string {
	if s, ok := opScopes[op.OperationID]; ok {
		return s
	}
	if isRead(method) {
		return store.AllScopes
	}
	return []string{store.ScopeAdmin}
}

// checkScope reports whether tok carries one of the scopes the request's
// operation needs; when not, it has written the 403 naming them.
func (s *Server) checkScope(ctx huma.Context, tok *store.APIToken) bool {
	need := scopesFor(ctx.Operation(), ctx.Method())
	if slices.ContainsFunc(need, tok.Has) {
		return true
	}
	huma.WriteErr(s.api, ctx, http.StatusForbidden, scopeMessage(ctx.Operation().OperationID, need, tok))
	return false
}

// scopeMessage says which scope an operation needs and what the token has.
func scopeMessage(opID string, need []string, tok *store.APIToken) string {
	has := "none"
	if len(tok.Scopes) > 0 {
		has = strings.Join(tok.Scopes, ", ")
	}
	want := "the '" + need[0] + "' scope"
	if len(need) > 1 {
		want = "one of the scopes '" + strings.Join(need, "', '") + "'"
	}
	return fmt.Sprintf("API token %q lacks %s, which %s needs (it has: %s); create a token with 'lesfarm token create --scope %s'",
		tok.Name, want, opID, has, need[0])
}

// documentScopes writes each operation's scopes into the OpenAPI
// document (the bearer requirement's scope list) and adds 403 to a
// mutation's errors.
func documentScopes(api huma.API) {
	for _, item := range api.OpenAPI().Paths {
		for method, op := range map[string]*huma.Operation{http.MethodGet: item.Get, http.MethodHead: item.Head,
			http.MethodPost: item.Post, http.MethodPut: item.Put, http.MethodPatch: item.Patch, http.MethodDelete: item.Delete} {
			if op == nil || op.Metadata["public"] == true {
				continue
			}
			need := scopesFor(op, method)
			if len(op.Security) == 0 {
				// A read: a token (of any scope) is needed only when the
				// server requires one for reads.
				continue
			}
			op.Security = []map[string][]string{{"bearer": need}}
			op.Description = strings.TrimSpace(op.Description + "\n\nNeeds an API token with the `" + strings.Join(need, "` or `") + "` scope (403 otherwise).")
			if op.Responses != nil {
				if _, ok := op.Responses["403"]; !ok {
					op.Responses["403"] = &huma.Response{Description: "The API token lacks the scope this operation needs.",
						Content: map[string]*huma.MediaType{"application/problem+json": {Schema: &huma.Schema{Ref: "#/components/schemas/ErrorModel"}}}}
				}
			}
		}
	}
}
