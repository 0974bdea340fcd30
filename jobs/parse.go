package jobs

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"strconv"
	"strings"

	"gopkg.in/yaml.v3"
)

// MaxSpecBytes bounds the size of a spec document.
const MaxSpecBytes = 1 << 20

// Format is the text format of a spec.
type Format int

// Formats accepted by Parse.
const (
	// FormatAuto detects JSON (the first non-space byte is '{') or YAML.
	FormatAuto Format = iota
	FormatYAML
	FormatJSON
)

// ParseFile reads and parses a spec file; the format follows the extension
// (.json is JSON, anything else YAML). Errors name the file.
func ParseFile(path string) (*Spec, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	f := FormatYAML
	if strings.EqualFold(filepath.Ext(path), ".json") {
		f = FormatJSON
	}
	s, err := Parse(data, f)
	var ve *ValidationError
	if errors.As(err, &ve) {
		ve.Source = path
	}
	return s, err
}

// Parse decodes, normalizes and validates a spec. On failure it returns a
// *ValidationError whose issues carry paths and line:column positions. It
// never panics on any input.
func Parse(data []byte, f Format) (*Spec, error) {
	if len(data) > MaxSpecBytes {
		return nil, &ValidationError{Issues: []Issue{{Message: fmt.Sprintf("spec too large (%d bytes, max %d)", len(data), MaxSpecBytes)}}}
	}
	if f == FormatAuto {
		f = FormatYAML
		if t := bytes.TrimLeft(data, " \t\r\n"); len(t) > 0 && t[0] == '{' {
			f = FormatJSON
		}
	}
	if f == FormatJSON {
		// JSON is parsed by the YAML parser below (for positions); first make
		// sure it really is JSON so both forms accept the same documents.
		if err := checkJSON(data); err != nil {
			return nil, &ValidationError{Issues: []Issue{*err}}
		}
	}
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		return nil, &ValidationError{Issues: yamlIssues(err)}
	}
	if doc.Kind != yaml.DocumentNode || len(doc.Content) != 1 {
		return nil, &ValidationError{Issues: []Issue{{Message: "empty spec"}}}
	}
	root := doc.Content[0]
	if root.Kind != yaml.MappingNode {
		return nil, &ValidationError{Issues: []Issue{{Line: root.Line, Column: root.Column, Message: "spec must be a mapping (an object of fields)"}}}
	}
	pos := map[string][2]int{}
	var is issues
	walk(root, reflect.TypeOf(Spec{}), "", pos, &is)
	if len(is) > 0 {
		return nil, is.err()
	}
	var s Spec
	if err := root.Decode(&s); err != nil {
		return nil, &ValidationError{Issues: yamlIssues(err)}
	}
	s.Normalize()
	if err := s.Validate(); err != nil {
		var ve *ValidationError
		if !errors.As(err, &ve) {
			return nil, err
		}
		for i := range ve.Issues {
			ve.Issues[i].Line, ve.Issues[i].Column = lookupPos(pos, ve.Issues[i].Path)
		}
		return nil, ve
	}
	return &s, nil
}

// checkJSON returns an issue with a position when data is not one JSON
// value.
func checkJSON(data []byte) *Issue {
	dec := json.NewDecoder(bytes.NewReader(data))
	var v any
	err := dec.Decode(&v)
	if err == nil {
		if _, err2 := dec.Token(); err2 == nil {
			off := dec.InputOffset()
			l, c := lineCol(data, off)
			return &Issue{Line: l, Column: c, Message: "invalid JSON: data after the top-level value"}
		}
		return nil
	}
	var se *json.SyntaxError
	if errors.As(err, &se) {
		l, c := lineCol(data, max(se.Offset-1, 0))
		return &Issue{Line: l, Column: c, Message: "invalid JSON: " + se.Error()}
	}
	return &Issue{Message: "invalid JSON: " + err.Error()}
}

func lineCol(data []byte, off int64) (int, int) {
	if off > int64(len(data)) {
		off = int64(len(data))
	}
	line, col := 1, 1
	for _, b := range data[:off] {
		if b == '\n' {
			line++
			col = 1
		} else {
			col++
		}
	}
	return line, col
}

var yamlLineRE = regexp.MustCompile(`^(?:yaml: )?line (\d+): (.*)$`)

// yamlIssues converts a yaml.v3 error into issues with line numbers.
func yamlIssues(err error) []Issue {
	var msgs []string
	var te *yaml.TypeError
	if errors.As(err, &te) {
		msgs = te.Errors
	} else {
		msgs = []string{err.Error()}
	}
	out := make([]Issue, 0, len(msgs))
	for _, m := range msgs {
		is := Issue{Message: strings.TrimPrefix(m, "yaml: ")}
		if sm := yamlLineRE.FindStringSubmatch(m); sm != nil {
			is.Line, _ = strconv.Atoi(sm[1])
			is.Message = sm[2]
		}
		is.Message = strings.ReplaceAll(is.Message, "jobs.", "")
		out = append(out, is)
	}
	return out
}

var unmarshalerType = reflect.TypeOf((*yaml.Unmarshaler)(nil)).Elem()

// walk checks node against the struct type t: unknown fields become issues
// (with the known field names), and every value's position is recorded in pos
// under its path.
func walk(n *yaml.Node, t reflect.Type, path string, pos map[string][2]int, is *issues) {
	for n.Kind == yaml.AliasNode && n.Alias != nil {
		n = n.Alias
	}
	pos[path] = [2]int{n.Line, n.Column}
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if reflect.PointerTo(t).Implements(unmarshalerType) {
		return
	}
	switch t.Kind() {
	case reflect.Struct:
		if n.Kind != yaml.MappingNode {
			return // Decode reports the type mismatch
		}
		fields := map[string]reflect.Type{}
		var names []string
		for i := 0; i < t.NumField(); i++ {
			f := t.Field(i)
			name, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
			if name == "" || name == "-" {
				continue
			}
			fields[name] = f.Type
			names = append(names, name)
		}
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, v := n.Content[i], n.Content[i+1]
			ft, ok := fields[k.Value]
			p := join(path, k.Value)
			if !ok {
				*is = append(*is, Issue{Path: p, Line: k.Line, Column: k.Column,
					Message: fmt.Sprintf("unknown field %q (want one of %s)", clip(k.Value), strings.Join(names, ", "))})
				continue
			}
			walk(v, ft, p, pos, is)
		}
	case reflect.Slice:
		if n.Kind != yaml.SequenceNode {
			return
		}
		for i, c := range n.Content {
			walk(c, t.Elem(), fmt.Sprintf("%s[%d]", path, i), pos, is)
		}
	case reflect.Map:
		if n.Kind != yaml.MappingNode {
			return
		}
		for i := 0; i+1 < len(n.Content); i += 2 {
			walk(n.Content[i+1], t.Elem(), join(path, n.Content[i].Value), pos, is)
		}
	}
}

func join(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

// lookupPos finds the position of path, or of its nearest recorded parent.
func lookupPos(pos map[string][2]int, path string) (int, int) {
	for {
		if p, ok := pos[path]; ok {
			return p[0], p[1]
		}
		i := strings.LastIndexAny(path, ".[")
		if i < 0 {
			p := pos[""]
			return p[0], p[1]
		}
		path = path[:i]
	}
}

// MarshalCanonical returns the spec as compact JSON with fields in a fixed
// order, the form the coordinator stores and fingerprints.
func (s *Spec) MarshalCanonical() ([]byte, error) { return json.Marshal(s) }

// YAML returns the spec as YAML text.
func (s *Spec) YAML() ([]byte, error) {
	var buf bytes.Buffer
	enc := yaml.NewEncoder(&buf)
	enc.SetIndent(2)
	if err := enc.Encode(s); err != nil {
		return nil, err
	}
	return buf.Bytes(), enc.Close()
}
