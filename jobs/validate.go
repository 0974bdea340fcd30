package jobs

import (
	"encoding/hex"
	"fmt"
	"net/url"
	"regexp"
	"strings"
	"time"
)

// Issue is one problem found in a spec.
type Issue struct {
	// Path locates the value, e.g. "matrix.modes[2]"; empty for the whole
	// document.
	Path string `json:"path"`
	// Line and Column are 1-based positions in the source text, or 0 when
	// the spec did not come from text.
	Line    int    `json:"line,omitempty"`
	Column  int    `json:"column,omitempty"`
	Message string `json:"message"`
}

// String formats the issue as "line:col: path: message".
func (i Issue) String() string {
	var b strings.Builder
	switch {
	case i.Line > 0 && i.Column > 0:
		fmt.Fprintf(&b, "%d:%d: ", i.Line, i.Column)
	case i.Line > 0:
		fmt.Fprintf(&b, "%d: ", i.Line)
	}
	if i.Path != "" {
		b.WriteString(i.Path)
		b.WriteString(": ")
	}
	b.WriteString(i.Message)
	return b.String()
}

// ValidationError lists every issue found in a spec. Parse and Validate
// return it (as *ValidationError).
type ValidationError struct {
	// Source names the input, e.g. a file name; may be empty.
	Source string
	Issues []Issue
}

// Error implements error: all issues on one line, separated by "; ".
func (e *ValidationError) Error() string {
	parts := make([]string, len(e.Issues))
	for i, is := range e.Issues {
		s := is.String()
		if e.Source != "" {
			if is.Line > 0 {
				s = e.Source + ":" + s
			} else {
				s = e.Source + ": " + s
			}
		}
		parts[i] = s
	}
	if len(parts) == 0 {
		return "invalid spec"
	}
	return strings.Join(parts, "; ")
}

type issues []Issue

func (is *issues) add(path, format string, args ...any) {
	*is = append(*is, Issue{Path: path, Message: fmt.Sprintf(format, args...)})
}

func (is issues) err() error {
	if len(is) == 0 {
		return nil
	}
	return &ValidationError{Issues: is}
}

var (
	nameRE    = regexp.MustCompile(`^[a-z0-9][a-z0-9._-]*$`)
	labelKey  = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._/-]*$`)
	sha256Len = 64
)

func quoteList[T ~string](vs []T) string {
	s := make([]string, len(vs))
	for i, v := range vs {
		s[i] = string(v)
	}
	return strings.Join(s, ", ")
}

// Validate checks a normalized spec and returns a *ValidationError listing
// every issue, or nil. Call Normalize first when defaults should apply.
func (s *Spec) Validate() error {
	var is issues
	checkName(&is, "name", s.Name, true)
	checkName(&is, "suite", s.Suite, false)
	if len(s.Description) > 4096 {
		is.add("description", "too long (%d bytes, max 4096)", len(s.Description))
	}
	s.Model.validate(&is)
	s.Prompts.validate(&is)
	if s.PrefillTokens < 0 || s.PrefillTokens > MaxTokens {
		is.add("prefill_tokens", "%d out of range [0, %d]", s.PrefillTokens, MaxTokens)
	}
	if s.DecodeTokens < 1 || s.DecodeTokens > MaxTokens {
		is.add("decode_tokens", "%d out of range [1, %d]", s.DecodeTokens, MaxTokens)
	}
	s.Matrix.validate(&is)
	if mp := s.MixedPrecision; mp != nil {
		if mp.Budget.Bytes < 0 || mp.Budget.Fraction < 0 || mp.Budget.Fraction > 1 {
			is.add("mixed_precision.budget", "%s out of range (a fraction in (0, 1] of the model file, or bytes)", mp.Budget)
		}
		if mp.CalibTokens < 0 || mp.CalibTokens > MaxCalibTokens {
			is.add("mixed_precision.calib_tokens", "%d out of range [0, %d]", mp.CalibTokens, MaxCalibTokens)
		}
	}
	if s.Warmup < 0 || s.Warmup > MaxWarmup {
		is.add("warmup", "%d out of range [0, %d]", s.Warmup, MaxWarmup)
	}
	if s.Repetitions < 1 || s.Repetitions > MaxRepetitions {
		is.add("repetitions", "%d out of range [1, %d]", s.Repetitions, MaxRepetitions)
	}
	if s.Cooldown < 0 || s.Cooldown.D() > MaxCooldown {
		is.add("cooldown", "%s out of range [0s, %s]", s.Cooldown, MaxCooldown)
	}
	if s.Timeout.D() < time.Second || s.Timeout.D() > MaxTimeout {
		is.add("timeout", "%s out of range [1s, %s]", s.Timeout, MaxTimeout)
	}
	s.Devices.validate(&is)
	if s.Retry.MaxAttempts < 1 || s.Retry.MaxAttempts > MaxAttempts {
		is.add("retry.max_attempts", "%d out of range [1, %d]", s.Retry.MaxAttempts, MaxAttempts)
	}
	if s.Priority < MinPriority || s.Priority > MaxPriority {
		is.add("priority", "%d out of range [%d, %d]", s.Priority, MinPriority, MaxPriority)
	}
	return is.err()
}

func checkName(is *issues, path, v string, required bool) {
	switch {
	case v == "" && required:
		is.add(path, "required")
	case v == "":
	case len(v) > MaxNameLen:
		is.add(path, "too long (%d bytes, max %d)", len(v), MaxNameLen)
	case !nameRE.MatchString(v):
		is.add(path, "invalid name %q (want lower-case letters, digits, '.', '_' or '-', starting with a letter or digit)", v)
	}
}

func (m *Model) validate(is *issues) {
	switch {
	case m.SHA256 == "":
		is.add("model.sha256", "required (64 hex digits)")
	case len(m.SHA256) != sha256Len || strings.ToLower(m.SHA256) != m.SHA256:
		is.add("model.sha256", "invalid sha256 %q (want 64 lower-case hex digits)", clip(m.SHA256))
	default:
		if _, err := hex.DecodeString(m.SHA256); err != nil {
			is.add("model.sha256", "invalid sha256 %q (want 64 lower-case hex digits)", clip(m.SHA256))
		}
	}
	if m.Size <= 0 {
		is.add("model.size", "required (the artifact's size in bytes)")
	}
	if m.URL != "" {
		u, err := url.Parse(m.URL)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			is.add("model.url", "invalid URL %q (want http:// or https://)", clip(m.URL))
		}
	}
	if m.URL != "" && m.Path != "" {
		is.add("model.path", "set either url or path, not both")
	}
	if len(m.Path) > 4096 || strings.ContainsRune(m.Path, 0) {
		is.add("model.path", "invalid path")
	}
	if len(m.Name) > 256 {
		is.add("model.name", "too long (%d bytes, max 256)", len(m.Name))
	}
	if m.Layout != LayoutAsIs && m.Layout != LayoutPacked && m.Layout != LayoutPackedCompat {
		is.add("model.layout", "unknown layout %q (want one of %s, %s, %s)", clip(m.Layout), LayoutAsIs, LayoutPacked, LayoutPackedCompat)
	}
}

func (p *Prompts) validate(is *issues) {
	switch {
	case p.Set == "" && len(p.Inline) == 0:
		is.add("prompts", "required: set a named prompt set (prompts.set) or inline prompts (prompts.inline)")
	case p.Set != "" && len(p.Inline) > 0:
		is.add("prompts", "set either prompts.set or prompts.inline, not both")
	case p.Set != "":
		if _, ok := PromptSet(p.Set); !ok {
			is.add("prompts.set", "unknown prompt set %q (want one of %s)", clip(p.Set), strings.Join(PromptSetNames(), ", "))
		}
	}
	if len(p.Inline) > MaxPrompts {
		is.add("prompts.inline", "too many prompts (%d, max %d)", len(p.Inline), MaxPrompts)
	}
	for i, s := range p.Inline {
		switch {
		case strings.TrimSpace(s) == "":
			is.add(fmt.Sprintf("prompts.inline[%d]", i), "empty prompt")
		case len(s) > MaxPromptBytes:
			is.add(fmt.Sprintf("prompts.inline[%d]", i), "too long (%d bytes, max %d)", len(s), MaxPromptBytes)
		}
	}
}

func (m *Matrix) validate(is *issues) {
	if len(m.Modes) == 0 {
		is.add("matrix.modes", "required: at least one of %s", quoteList(Modes))
	}
	if len(m.Modes) > MaxMatrixValues {
		is.add("matrix.modes", "too many values (%d, max %d)", len(m.Modes), MaxMatrixValues)
	}
	streaming := false
	seenMode := map[Mode]int{}
	for i, md := range m.Modes {
		p := fmt.Sprintf("matrix.modes[%d]", i)
		if !md.Valid() {
			is.add(p, "unknown mode %q (want one of %s)", clip(string(md)), quoteList(Modes))
			continue
		}
		if j, dup := seenMode[md]; dup {
			is.add(p, "duplicate mode %q (also at matrix.modes[%d])", md, j)
			continue
		}
		seenMode[md] = i
		streaming = streaming || md.NeedsBudget()
	}
	if len(m.Budgets) > MaxMatrixValues {
		is.add("matrix.budgets", "too many values (%d, max %d)", len(m.Budgets), MaxMatrixValues)
	}
	if streaming && len(m.Budgets) == 0 {
		is.add("matrix.budgets", "required when a streaming mode is listed (e.g. budgets: [25%%, 50%%])")
	}
	seenBudget := map[Budget]int{}
	for i, b := range m.Budgets {
		p := fmt.Sprintf("matrix.budgets[%d]", i)
		switch {
		case b.IsZero():
			is.add(p, "budget must be positive")
			continue
		case b.Fraction < 0 || b.Fraction > 1:
			is.add(p, "fraction %s out of range (0%%, 100%%]", b)
			continue
		case b.Bytes < 0:
			is.add(p, "negative budget")
			continue
		case b.Bytes > 0 && b.Bytes < 1<<20:
			is.add(p, "budget %d bytes is below 1MiB; write a fraction as 25%% or 0.25", b.Bytes)
			continue
		}
		if j, dup := seenBudget[b]; dup {
			is.add(p, "duplicate budget %s (also at matrix.budgets[%d])", b, j)
			continue
		}
		seenBudget[b] = i
	}
	if len(m.Profiles) > MaxMatrixValues {
		is.add("matrix.profiles", "too many values (%d, max %d)", len(m.Profiles), MaxMatrixValues)
	}
	seenProfile := map[string]int{}
	for i, pr := range m.Profiles {
		p := fmt.Sprintf("matrix.profiles[%d]", i)
		if !nameRE.MatchString(pr) || len(pr) > MaxNameLen {
			is.add(p, "invalid profile name %q (want lower-case letters, digits, '.', '_' or '-')", clip(pr))
			continue
		}
		if j, dup := seenProfile[pr]; dup {
			is.add(p, "duplicate profile %q (also at matrix.profiles[%d])", pr, j)
			continue
		}
		seenProfile[pr] = i
	}
	if n := m.count(); n > MaxConfigs {
		is.add("matrix", "expands to %d configs (max %d)", n, MaxConfigs)
	}
}

func (m *Matrix) count() int {
	profiles := max(len(m.Profiles), 1)
	n := 0
	for _, md := range m.Modes {
		if md.NeedsBudget() {
			n += max(len(m.Budgets), 1) * profiles
		} else {
			n += profiles
		}
	}
	return n
}

func (s *Selector) validate(is *issues) {
	if s.Platform != "" && !contains(Platforms, s.Platform) {
		is.add("devices.platform", "unknown platform %q (want one of %s)", clip(s.Platform), strings.Join(Platforms, ", "))
	}
	if len(s.Labels) > MaxLabels {
		is.add("devices.labels", "too many labels (%d, max %d)", len(s.Labels), MaxLabels)
	}
	for _, k := range sortedKeys(s.Labels) {
		v := s.Labels[k]
		if !labelKey.MatchString(k) || len(k) > MaxLabelLen {
			is.add("devices.labels."+clip(k), "invalid label key (want letters, digits, '.', '_', '/' or '-')")
		}
		if len(v) > MaxLabelLen {
			is.add("devices.labels."+clip(k), "value too long (%d bytes, max %d)", len(v), MaxLabelLen)
		}
	}
	if s.MinRAM < 0 {
		is.add("devices.min_ram", "negative size")
	}
	if len(s.DeviceModel) > 256 {
		is.add("devices.device_model", "too long (%d bytes, max 256)", len(s.DeviceModel))
	}
}

func contains(list []string, v string) bool {
	for _, x := range list {
		if x == v {
			return true
		}
	}
	return false
}

// clip shortens a user value quoted in an error message.
func clip(s string) string {
	if len(s) > 64 {
		return s[:64] + "..."
	}
	return s
}
