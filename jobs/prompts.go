package jobs

import (
	"embed"
	"path"
	"sort"
	"strings"
)

//go:embed prompts/*.txt
var promptFS embed.FS

// PromptSet returns the prompts of a named built-in prompt set ("kjv",
// "smoke", "long"), or false when there is none by that name. The returned
// slice is a fresh copy.
func PromptSet(name string) ([]string, bool) {
	if !nameRE.MatchString(name) {
		return nil, false
	}
	data, err := promptFS.ReadFile("prompts/" + name + ".txt")
	if err != nil {
		return nil, false
	}
	var out []string
	for _, line := range strings.Split(string(data), "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		out = append(out, line)
	}
	return out, true
}

// PromptSetNames lists the built-in prompt sets, sorted.
func PromptSetNames() []string {
	ents, _ := promptFS.ReadDir("prompts")
	var out []string
	for _, e := range ents {
		out = append(out, strings.TrimSuffix(path.Base(e.Name()), ".txt"))
	}
	sort.Strings(out)
	return out
}

// ResolvePrompts returns the spec's prompts: the inline ones, or the named
// set's.
func (s *Spec) ResolvePrompts() []string {
	if len(s.Prompts.Inline) > 0 {
		return append([]string(nil), s.Prompts.Inline...)
	}
	p, _ := PromptSet(s.Prompts.Set)
	return p
}

//go:embed calib/kjv.txt
var calibKJV string

// CalibrationText is the text the agent's mixed-precision planner measures
// sensitivity on: KJV Ruth 1-4 and Jonah 1-4 (public domain, one chapter
// per line), training-distribution text for the trained fixture that its
// validation text does not contain.
func CalibrationText() string { return calibKJV }
