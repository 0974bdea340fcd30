package tokenizer

import (
	"path/filepath"
	"reflect"
	"testing"
)

func splitWords(kind preKind, text string) []string {
	var c cpts
	text = sanitize(text)
	var out []string
	for _, w := range split(kind, text, &c, nil) {
		out = append(out, text[w[0]:w[1]])
	}
	return out
}

// TestPretokenizeRegex compares the hand-written scanners with the original
// regexes evaluated by Python's regex module (testdata/gen_pretok.py) on
// random strings mixing letters, digits, punctuation, marks and many kinds
// of whitespace.
func TestPretokenizeRegex(t *testing.T) {
	var file struct {
		Cases []struct {
			Pre    string   `json:"pre"`
			Text   string   `json:"text"`
			Pieces []string `json:"pieces"`
		} `json:"cases"`
	}
	readJSON(t, filepath.Join("testdata", "pretok.json"), &file)
	kinds := map[string]preKind{"gpt-2": preGPT2, "qwen2": preQwen2, "llama3": preLlama3, "refact": preDigitsGPT2, "default": preDefault}
	fails := 0
	for _, c := range file.Cases {
		got := splitWords(kinds[c.Pre], c.Text)
		if !reflect.DeepEqual(got, c.Pieces) {
			fails++
			if fails <= 10 {
				t.Errorf("%s %q:\n got %q\nwant %q", c.Pre, c.Text, got, c.Pieces)
			}
		}
	}
	if fails > 0 {
		t.Errorf("%d of %d cases differ", fails, len(file.Cases))
	}
}

func TestPretokenizeExamples(t *testing.T) {
	tests := []struct {
		kind preKind
		text string
		want []string
	}{
		{preQwen2, "At 7:45 on 12 March", []string{"At", " ", "7", ":", "4", "5", " on", " ", "1", "2", " March"}},
		{preQwen2, "don't  stop\n\n now", []string{"don", "'t", " ", " stop", "\n\n", " now"}},
		{preQwen2, "hello   \tworld", []string{"hello", "   ", "\tworld"}},
		{preQwen2, "x  ", []string{"x", "  "}},
		{preQwen2, "a —b", []string{"a", " —", "b"}},
		{preLlama3, "1234567", []string{"123", "456", "7"}},
		// Qwen3.5 adds \p{M} to the letter classes: a combining accent stays
		// in its word (Qwen2 splits it off as punctuation).
		{preQwen2, "Cafe\u0301 x", []string{"Cafe", "\u0301", " x"}},
		{preQwen35, "Cafe\u0301 x", []string{"Cafe\u0301", " x"}},
		{preQwen35, " \u0301a,\u0301", []string{" \u0301a", ",\u0301"}},
		{preQwen35, "e\u0301\u0301 12", []string{"e\u0301\u0301", " ", "1", "2"}},
		{preGPT2, "I'm 12345 'S", []string{"I", "'m", " 12345", " '", "S"}},
		{preGPT2, "a  b", []string{"a", " ", " b"}},
		{preGPT2, "a\tb", []string{"a", "\t", "b"}},
		{preGPT2, "end  ", []string{"end", "  "}},
		{preDefault, "x=12345,y", []string{"x", "=", "123", "45", ",", "y"}},
		{preDefault, "hello world!!", []string{"hello", " world", "!!"}},
		// Invalid UTF-8 becomes U+FFFD, as llama.cpp's decoder does.
		{preGPT2, "a\xffb", []string{"a", "\uFFFD", "b"}},
		{preQwen2, "\xc3", []string{"\uFFFD"}},
	}
	for _, tc := range tests {
		if got := splitWords(tc.kind, tc.text); !reflect.DeepEqual(got, tc.want) {
			t.Errorf("kind %d %q: got %q, want %q", tc.kind, tc.text, got, tc.want)
		}
	}
}

func TestSanitize(t *testing.T) {
	tests := []struct{ in, want string }{
		{"plain", "plain"},
		{"\xff", "\uFFFD"},
		{"a\x80b", "a\uFFFDb"},
		{"\xc0\x80", "\x00"},             // overlong NUL decodes to U+0000 in llama.cpp
		{"\xed\xa0\x80", "\xed\xa0\x80"}, // a surrogate passes through
		{"\xf4\x90\x80\x80", "\uFFFD"},   // above U+10FFFF (llama.cpp throws)
		{"\xe2\x82", "\uFFFD\uFFFD"},     // truncated sequence: one U+FFFD per byte
	}
	for _, tc := range tests {
		if got := sanitize(tc.in); got != tc.want {
			t.Errorf("sanitize(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}
