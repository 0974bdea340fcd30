package api

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/danielgtaylor/huma/v2"

	"github.com/lesfarm/lesfarm/jobs"
)

// strictDecode decodes raw JSON into v, rejecting unknown fields and
// trailing data.
func strictDecode(raw json.RawMessage, v any) error {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return err
	}
	if dec.More() {
		return errors.New("unexpected data after the JSON value")
	}
	return nil
}

// decodeErr turns a JSON decoding error into a 422 with a location under
// loc (the field named by the decoder, when it names one).
func decodeErr(loc string, raw json.RawMessage, err error) error {
	var ute *json.UnmarshalTypeError
	if errors.As(err, &ute) && ute.Field != "" {
		loc += "." + ute.Field
	}
	msg := err.Error()
	if f, ok := strings.CutPrefix(msg, "json: unknown field "); ok {
		loc += "." + strings.Trim(f, `"`)
		msg = "unknown field " + f
	}
	return huma.Error422UnprocessableEntity("validation failed", &huma.ErrorDetail{
		Location: loc, Message: msg, Value: raw,
	})
}

// decodeSelector parses an optional device selector.
func decodeSelector(raw json.RawMessage, loc string) (*jobs.Selector, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return nil, nil
	}
	var sel jobs.Selector
	if err := strictDecode(raw, &sel); err != nil {
		return nil, decodeErr(loc, raw, err)
	}
	// Validate through a minimal spec so the jobs package's rules apply;
	// only issues under "devices" concern the selector.
	if err := validateSelector(&sel); err != nil {
		if perr := specIssues(err, loc, "devices"); perr != nil {
			return nil, perr
		}
	}
	return &sel, nil
}

// decodeOverride parses an optional config override; it is validated
// against each job's spec when applied.
func decodeOverride(raw json.RawMessage, loc string) (*jobs.Override, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return nil, nil
	}
	var ov jobs.Override
	if err := strictDecode(raw, &ov); err != nil {
		return nil, decodeErr(loc, raw, err)
	}
	return &ov, nil
}

// validateSelector checks a selector with the jobs package's validation
// by applying it to a built-in suite's spec.
func validateSelector(sel *jobs.Selector) error {
	base, err := jobs.Builtin("smoke")
	if err != nil {
		return nil //nolint:nilerr // no built-in suite: nothing to validate against
	}
	_, err = base.Apply(&jobs.Override{Devices: sel})
	return err
}

// specIssues converts a *jobs.ValidationError into a 422 problem whose
// errors carry locations under loc. Only issues whose path starts with
// keep (when not empty) are kept, with keep stripped.
func specIssues(err error, loc, keep string) error {
	var ve *jobs.ValidationError
	if !errors.As(err, &ve) {
		return huma.Error422UnprocessableEntity("validation failed", &huma.ErrorDetail{Location: loc, Message: err.Error()})
	}
	var details []error
	for _, is := range ve.Issues {
		p := is.Path
		if keep != "" {
			rest, ok := strings.CutPrefix(p, keep)
			if !ok {
				continue
			}
			p = strings.TrimPrefix(rest, ".")
		}
		l := loc
		if p != "" {
			if strings.HasPrefix(p, "[") {
				l += p
			} else {
				l += "." + p
			}
		}
		msg := is.Message
		if is.Line > 0 {
			msg = fmt.Sprintf("%s (line %d, column %d)", msg, is.Line, is.Column)
		}
		details = append(details, &huma.ErrorDetail{Location: l, Message: msg})
	}
	if len(details) == 0 {
		return nil
	}
	return huma.Error422UnprocessableEntity("validation failed", details...)
}

// lineageFilter turns a lineage query parameter into the store's filter:
// "*" (the dashboard's "every lineage") and "" both mean every lineage.
func lineageFilter(q string) string {
	if q == "*" {
		return ""
	}
	return q
}

// unmarshalJSON is the API's JSON request decoder: json.Unmarshal, whose
// syntax errors say where in the body they are (line, column and byte
// offset) and whose type errors name the field.
func unmarshalJSON(data []byte, v any) error {
	err := json.Unmarshal(data, v)
	var se *json.SyntaxError
	if errors.As(err, &se) {
		line, col := position(data, se.Offset)
		return fmt.Errorf("line %d, column %d (byte %d): %w", line, col, se.Offset, err)
	}
	var ute *json.UnmarshalTypeError
	if errors.As(err, &ute) && ute.Field != "" {
		return fmt.Errorf("field %s: expected %s, got %s", ute.Field, ute.Type, ute.Value)
	}
	return err
}

// position returns the 1-based line and column of byte offset off in data
// (a json.SyntaxError's Offset counts the bytes read, so the offending one
// is the last of them).
func position(data []byte, off int64) (line, col int) {
	off = min(max(off, 1), int64(len(data))+1)
	line, col = 1, 1
	for _, b := range data[:off-1] {
		if b == '\n' {
			line, col = line+1, 1
			continue
		}
		col++
	}
	return line, col
}

// malformedBody rewrites huma's 400 for a body that is not JSON, whose
// detail read only "validation failed", to say so and where:
// "malformed JSON body: line 1, column 14 (byte 14): invalid character …".
func malformedBody(status int, msg string, errs []error) string {
	if status != http.StatusBadRequest || msg != "validation failed" || len(errs) != 1 {
		return msg
	}
	var d *huma.ErrorDetail
	if !errors.As(errs[0], &d) || d.Location != "body" {
		return msg
	}
	return "malformed JSON body: " + d.Message
}
