package api

import (
	"encoding/json"
	"log/slog"
	"reflect"
	"regexp"
	"sort"
	"strings"
	"testing"

	"github.com/danielgtaylor/huma/v2"

	"github.com/lesfarm/lesfarm/jobs"
	"github.com/lesfarm/lesfarm/protocol"
)

// openAPIDoc returns the server's OpenAPI document as generic JSON. It
// needs no database: the document is built at registration.
func openAPIDoc(t *testing.T) map[string]any {
	t.Helper()
	_, hapi, err := New(Deps{Store: frozenStore(t), Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	b, err := json.Marshal(hapi.OpenAPI())
	if err != nil {
		t.Fatal(err)
	}
	var doc map[string]any
	if err := json.Unmarshal(b, &doc); err != nil {
		t.Fatal(err)
	}
	return doc
}

func componentSchemas(t *testing.T, doc map[string]any) map[string]map[string]any {
	t.Helper()
	comps, _ := doc["components"].(map[string]any)
	raw, _ := comps["schemas"].(map[string]any)
	out := map[string]map[string]any{}
	for name, s := range raw {
		if m, ok := s.(map[string]any); ok {
			out[name] = m
		}
	}
	if len(out) == 0 {
		t.Fatal("the OpenAPI document has no component schemas")
	}
	return out
}

// foreignSchemaNames are the component schemas of types the API does not
// own: the job spec and the agent protocol (documented in their packages
// and shared with agents and spec files) and huma's error model. They are
// found by walking those types, so a new field type in them is covered
// without editing this list.
func foreignSchemaNames() map[string]bool {
	names := map[string]bool{}
	seen := map[reflect.Type]bool{}
	var walk func(t reflect.Type)
	walk = func(t reflect.Type) {
		for t.Kind() == reflect.Pointer || t.Kind() == reflect.Slice || t.Kind() == reflect.Array || t.Kind() == reflect.Map {
			t = t.Elem()
		}
		if t.Kind() != reflect.Struct || seen[t] {
			return
		}
		seen[t] = true
		names[huma.DefaultSchemaNamer(t, "")] = true
		for i := range t.NumField() {
			walk(t.Field(i).Type)
		}
	}
	for _, v := range []any{jobs.Spec{}, jobs.Config{}, jobs.Selector{}, jobs.Override{}, protocol.Fingerprint{}, protocol.ModelFacts{}, huma.ErrorModel{}, huma.ErrorDetail{}} {
		walk(reflect.TypeOf(v))
	}
	return names
}

// TestOpenAPIFieldsDocumented: every field of every schema the API owns
// (responses, request bodies, events) has a description in the OpenAPI
// document, and every scalar field an example, so the contract is readable
// without the Go source.
func TestOpenAPIFieldsDocumented(t *testing.T) {
	t.Parallel()
	schemas := componentSchemas(t, openAPIDoc(t))
	foreign := foreignSchemaNames()
	var missing []string
	checked := map[string]bool{}
	for name, s := range schemas {
		if foreign[name] {
			continue
		}
		props, _ := s["properties"].(map[string]any)
		for field, p := range props {
			if field == "$schema" { // huma's link to the JSON schema, added to every body
				continue
			}
			checked[name] = true
			ps, _ := p.(map[string]any)
			if d, _ := ps["description"].(string); strings.TrimSpace(d) == "" {
				missing = append(missing, name+"."+field+": no description")
			}
			// A scalar field also shows an example value (objects and
			// lists are shown by their own schemas' examples).
			if ts := schemaTypes(ps); len(ts) > 0 && ts[0] != "object" && ts[0] != "array" && ps["examples"] == nil {
				missing = append(missing, name+"."+field+": no example")
			}
		}
	}
	sort.Strings(missing)
	if len(missing) > 0 {
		t.Errorf("%d fields of API-owned schemas lack a description or example (add doc and example tags):\n  %s", len(missing), strings.Join(missing, "\n  "))
	}
	// The walk must have covered the resources, or it proves nothing.
	for _, name := range []string{"Run", "RunDetail", "TriggerResult", "Trigger", "Job", "Result", "Stat", "Device", "DeviceProfile", "Suite",
		"Schedule", "ScheduleFiring", "ScheduleBody", "TriggerBody", "AlertGroup", "Alert", "Series", "SeriesPoint", "SeriesWithPoints",
		"SeriesFamily", "Lineage", "Artifact", "GCReport", "RunEvent", "DoneEvent", "Timeline", "LayerBreakdown"} {
		if !checked[name] {
			t.Errorf("schema %s was not checked (renamed, or no longer in the document?)", name)
		}
	}
}

// durationName matches field and parameter names that hold a duration.
var durationName = regexp.MustCompile(`(?i)(timeout|ttl|duration|interval|grace|catchup|cooldown|backoff|retry_after)`)

// schemaTypes returns a schema's JSON types ("type" is a string or, for a
// nullable field, a list).
func schemaTypes(s map[string]any) []string {
	switch v := s["type"].(type) {
	case string:
		return []string{v}
	case []any:
		var out []string
		for _, x := range v {
			if str, ok := x.(string); ok {
				out = append(out, str)
			}
		}
		return out
	}
	return nil
}

// TestOpenAPINoNanosecondDurations: no schema field or parameter named like
// a duration (timeout, ttl, duration, interval, ...) is a number, in any
// schema of the document (the API's own and the job spec's): durations are
// Go duration strings everywhere. Deprecated request fields that keep an
// old seconds spelling working are the only exception. The fields that
// once leaked nanoseconds are checked by name to be strings.
func TestOpenAPINoNanosecondDurations(t *testing.T) {
	t.Parallel()
	doc := openAPIDoc(t)
	schemas := componentSchemas(t, doc)
	var bad []string
	var walk func(where string, s map[string]any)
	walk = func(where string, s map[string]any) {
		props, _ := s["properties"].(map[string]any)
		for field, p := range props {
			ps, _ := p.(map[string]any)
			if ps == nil {
				continue
			}
			if durationName.MatchString(field) && ps["deprecated"] != true {
				for _, ty := range schemaTypes(ps) {
					if ty == "integer" || ty == "number" {
						bad = append(bad, where+"."+field+" is "+ty)
					}
				}
			}
			walk(where+"."+field, ps)
		}
		if items, ok := s["items"].(map[string]any); ok {
			walk(where+"[]", items)
		}
	}
	for name, s := range schemas {
		walk(name, s)
	}
	paths, _ := doc["paths"].(map[string]any)
	for path, item := range paths {
		ops, _ := item.(map[string]any)
		for method, op := range ops {
			o, _ := op.(map[string]any)
			params, _ := o["parameters"].([]any)
			for _, p := range params {
				pm, _ := p.(map[string]any)
				name, _ := pm["name"].(string)
				sch, _ := pm["schema"].(map[string]any)
				if durationName.MatchString(name) && sch != nil {
					for _, ty := range schemaTypes(sch) {
						if ty == "integer" || ty == "number" {
							bad = append(bad, method+" "+path+" parameter "+name+" is "+ty)
						}
					}
				}
			}
		}
	}
	sort.Strings(bad)
	if len(bad) > 0 {
		t.Errorf("durations must be Go duration strings on the wire (docs/api.md, Durations):\n  %s", strings.Join(bad, "\n  "))
	}
	for _, f := range []struct{ schema, field string }{
		{"Run", "timeout"}, {"Device", "ttl"}, {"Schedule", "catchup"}, {"ScheduleBody", "catchup"}, {"Spec", "timeout"},
	} {
		props, _ := schemas[f.schema]["properties"].(map[string]any)
		ps, _ := props[f.field].(map[string]any)
		if ts := schemaTypes(ps); len(ts) != 1 || ts[0] != "string" {
			t.Errorf("%s.%s has type %v, want string", f.schema, f.field, ts)
		}
	}
}
