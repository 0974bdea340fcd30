package tokenizer

import (
	"unicode"
	"unicode/utf8"
)

// This file splits text into words before BPE, reproducing llama.cpp's
// unicode.cpp: the hand-written splitters for the GPT-2 and LLaMA-3 style
// regexes, and the semantics of the std::regex path it uses for qwen2 (which
// is the LLaMA-3 splitter with single-digit numbers). Go's regexp has no
// lookahead, so `\s+(?!\S)` is implemented by hand here, exactly as
// llama.cpp's custom splitters do.

// Character classes as llama.cpp's unicode_cpt_flags sees them.
const (
	clsOther  uint8 = iota // punctuation, symbols, marks, controls, unassigned
	clsLetter              // \p{L}
	clsNumber              // \p{N}
	clsSpace               // \s: Unicode White_Space
	clsNone                // past the end of the fragment (llama.cpp's OUT_OF_RANGE, zero flags)
)

var asciiClass = func() (t [128]uint8) {
	for c := 0; c < 128; c++ {
		switch {
		case c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z':
			t[c] = clsLetter
		case c >= '0' && c <= '9':
			t[c] = clsNumber
		case c == ' ' || c >= '\t' && c <= '\r':
			t[c] = clsSpace
		default:
			t[c] = clsOther
		}
	}
	return t
}()

// classOf returns the class of a code point. Whitespace wins over the
// general category, as in llama.cpp's collapsed representation.
func classOf(r rune) uint8 {
	if r < 128 && r >= 0 {
		return asciiClass[r]
	}
	switch {
	case unicode.Is(unicode.White_Space, r):
		return clsSpace
	case unicode.IsLetter(r):
		return clsLetter
	case unicode.IsNumber(r):
		return clsNumber
	}
	return clsOther
}

// isPunctDefault reports whether r is in the "default" pre-tokenizer's
// first class `[\p{P}\$\+<=>\^~\|]` as llama.cpp evaluates it: its ASCII
// punctuation list plus $+<=>^~| and non-ASCII category P.
func isPunctDefault(r rune) bool {
	if r < 128 {
		switch r {
		case '!', '"', '#', '%', '&', '\'', '(', ')', '*', ',', '-', '.', '/', ':', ';', '?', '@', '[', '\\', ']', '_', '{', '}',
			'$', '+', '<', '=', '>', '^', '~', '|':
			return true
		}
		return false
	}
	return !unicode.Is(unicode.White_Space, r) && unicode.IsPunct(r)
}

// decodeCpt decodes one code point at s[i:] the way llama.cpp's
// unicode_cpt_from_utf8 does: it accepts overlong forms and surrogates and
// only checks lead and continuation bits. ok is false for an invalid
// sequence, which llama.cpp replaces by U+FFFD and skips one byte.
func decodeCpt(s string, i int) (r rune, size int, ok bool) {
	c := s[i]
	switch {
	case c < 0x80:
		return rune(c), 1, true
	case c&0x40 == 0:
		return 0, 1, false
	case c&0x20 == 0:
		if i+1 >= len(s) || s[i+1]&0xc0 != 0x80 {
			return 0, 1, false
		}
		return rune(c&0x1f)<<6 | rune(s[i+1]&0x3f), 2, true
	case c&0x10 == 0:
		if i+2 >= len(s) || s[i+1]&0xc0 != 0x80 || s[i+2]&0xc0 != 0x80 {
			return 0, 1, false
		}
		return rune(c&0x0f)<<12 | rune(s[i+1]&0x3f)<<6 | rune(s[i+2]&0x3f), 3, true
	case c&0x08 == 0:
		if i+3 >= len(s) || s[i+1]&0xc0 != 0x80 || s[i+2]&0xc0 != 0x80 || s[i+3]&0xc0 != 0x80 {
			return 0, 1, false
		}
		return rune(c&0x07)<<18 | rune(s[i+1]&0x3f)<<12 | rune(s[i+2]&0x3f)<<6 | rune(s[i+3]&0x3f), 4, true
	}
	return 0, 1, false
}

// appendCpt encodes a code point like llama.cpp's unicode_cpt_to_utf8,
// which (unlike utf8.AppendRune) encodes surrogates as three bytes. Code
// points above U+10FFFF, where llama.cpp throws, become U+FFFD.
func appendCpt(b []byte, r rune) []byte {
	switch {
	case r < 0x80:
		return append(b, byte(r))
	case r < 0x800:
		return append(b, 0xc0|byte(r>>6), 0x80|byte(r)&0x3f)
	case r < 0x10000:
		return append(b, 0xe0|byte(r>>12), 0x80|byte(r>>6)&0x3f, 0x80|byte(r)&0x3f)
	case r <= 0x10ffff:
		return append(b, 0xf0|byte(r>>18)&0x07, 0x80|byte(r>>12)&0x3f, 0x80|byte(r>>6)&0x3f, 0x80|byte(r)&0x3f)
	}
	return append(b, "\uFFFD"...)
}

// sanitize returns text as llama.cpp's tokenizer sees it: decoded with its
// lenient decoder and re-encoded, so each invalid byte becomes U+FFFD.
// Valid UTF-8 is returned unchanged.
func sanitize(text string) string {
	if utf8.ValidString(text) {
		return text
	}
	b := make([]byte, 0, len(text)+16)
	for i := 0; i < len(text); {
		r, n, ok := decodeCpt(text, i)
		if !ok {
			r = utf8.RuneError
		}
		b = appendCpt(b, r)
		i += n
	}
	return string(b)
}

// cpts holds the code points of a (sanitized) fragment with their classes
// and byte offsets, so splitters can work on code point positions.
type cpts struct {
	r   []rune
	cls []uint8
	off []int // byte offset of each code point, plus len(text) at the end
}

func (c *cpts) load(text string) {
	c.r, c.cls, c.off = c.r[:0], c.cls[:0], c.off[:0]
	for i := 0; i < len(text); {
		var r rune
		n := 1
		if b := text[i]; b < 0x80 {
			r = rune(b)
		} else {
			var ok bool
			r, n, ok = decodeCpt(text, i)
			if !ok || r > 0x10ffff {
				r = utf8.RuneError // cannot happen after sanitize
			}
		}
		c.r = append(c.r, r)
		c.cls = append(c.cls, classOf(r))
		c.off = append(c.off, i)
		i += n
	}
	c.off = append(c.off, len(text))
}

// splitter cuts the code points [ini, end) into pieces and calls emit with
// code point boundaries.
type splitter struct {
	c    *cpts
	ini  int
	end  int
	prev int
	emit func(from, to int)
}

func (s *splitter) cls(pos int) uint8 {
	if pos < s.ini || pos >= s.end {
		return clsNone
	}
	return s.c.cls[pos]
}

func (s *splitter) cpt(pos int) rune {
	if pos < s.ini || pos >= s.end {
		return -1
	}
	return s.c.r[pos]
}

// add ends a piece at end and returns its length in code points.
func (s *splitter) add(end int) int {
	n := end - s.prev
	if n > 0 {
		s.emit(s.prev, end)
	}
	s.prev = end
	return n
}

func lowerASCII(r rune) rune {
	if r >= 'A' && r <= 'Z' {
		return r + 'a' - 'A'
	}
	return r
}

// contraction returns the length of 's|'t|'re|'ve|'m|'ll|'d at pos, or 0.
func (s *splitter) contraction(pos int, fold bool) int {
	if s.cpt(pos) != '\'' || pos+1 >= s.end {
		return 0
	}
	c1 := s.cpt(pos + 1)
	if fold {
		c1 = lowerASCII(c1)
	}
	if c1 == 's' || c1 == 't' || c1 == 'm' || c1 == 'd' {
		return 2
	}
	if pos+2 < s.end {
		c2 := s.cpt(pos + 2)
		if fold {
			c2 = lowerASCII(c2)
		}
		if c1 == 'r' && c2 == 'e' || c1 == 'v' && c2 == 'e' || c1 == 'l' && c2 == 'l' {
			return 3
		}
	}
	return 0
}

// gpt2 implements `'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+`
// (llama.cpp unicode_regex_split_custom_gpt2).
func (s *splitter) gpt2() {
	for pos := s.ini; pos < s.end; {
		if n := s.contraction(pos, false); n > 0 {
			pos += s.add(pos + n)
			continue
		}
		cpt := s.cpt(pos)
		space := 0
		if cpt == ' ' {
			space = 1
		}
		c2 := s.cls(pos + space)
		switch c2 {
		case clsLetter, clsNumber:
			pos += space
			for s.cls(pos) == c2 {
				pos++
			}
			s.add(pos)
			continue
		case clsOther:
			pos += space
			for s.cls(pos) == clsOther {
				pos++
			}
			s.add(pos)
			continue
		}
		nws := 0
		for s.cls(pos+nws) == clsSpace {
			nws++
		}
		if nws > 1 && pos+nws < s.end { // \s+(?!\S)
			pos += nws - 1
			s.add(pos)
			continue
		}
		if nws > 0 { // \s+
			pos += nws
			s.add(pos)
			continue
		}
		pos++
		s.add(pos) // no match
	}
}

// llama3 implements `(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,G}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`
// with G = digits: 3 for LLaMA 3 (llama.cpp unicode_regex_split_custom_llama3)
// and 1 for Qwen2, whose regex differs only in `\p{N}`.
func (s *splitter) llama3(digits int) {
	for pos := s.ini; pos < s.end; {
		if n := s.contraction(pos, true); n > 0 {
			pos += s.add(pos + n)
			continue
		}
		cpt := s.cpt(pos)
		cls := s.cls(pos)
		// [^\r\n\p{L}\p{N}]?\p{L}+
		if !(cpt == '\r' || cpt == '\n' || cls == clsNumber) {
			if cls == clsLetter || s.cls(pos+1) == clsLetter {
				pos++
				for s.cls(pos) == clsLetter {
					pos++
				}
				s.add(pos)
				continue
			}
		}
		// \p{N}{1,G}
		if cls == clsNumber {
			ini := pos
			for s.cls(pos) == clsNumber {
				pos++
				if pos-ini >= digits {
					s.add(pos)
					ini = pos
				}
			}
			s.add(pos)
			continue
		}
		// <space>?[^\s\p{L}\p{N}]+[\r\n]*
		c2 := cls
		if cpt == ' ' {
			c2 = s.cls(pos + 1)
		}
		if c2 == clsOther || c2 == clsNone {
			if cpt == ' ' {
				pos++
			}
			for s.cls(pos) == clsOther {
				pos++
			}
			for r := s.cpt(pos); r == '\r' || r == '\n'; r = s.cpt(pos) {
				pos++
			}
			s.add(pos)
			continue
		}
		nws, lastNL := 0, 0
		for s.cls(pos+nws) == clsSpace {
			if r := s.cpt(pos + nws); r == '\r' || r == '\n' {
				lastNL = pos + nws + 1
			}
			nws++
		}
		if lastNL > 0 { // \s*[\r\n]+
			pos = lastNL
			s.add(pos)
			continue
		}
		if nws > 1 && pos+nws < s.end { // \s+(?!\S)
			pos += nws - 1
			s.add(pos)
			continue
		}
		if nws > 0 { // \s+
			pos += nws
			s.add(pos)
			continue
		}
		pos++
		s.add(pos)
	}
}

// runs splits [ini, end) into maximal runs where in(pos) holds and the gaps
// between them (llama.cpp's std::regex path for a `[class]+` regex: each
// match and each gap is a piece).
func (s *splitter) runs(in func(pos int) bool) {
	for pos := s.ini; pos < s.end; {
		start := pos
		want := in(pos)
		for pos < s.end && in(pos) == want {
			pos++
		}
		s.emit(start, pos)
	}
}

// singles makes each code point where in holds a piece of its own, and the
// runs between them pieces (the std::regex path for a one-character regex
// such as `\p{N}`).
func (s *splitter) singles(in func(pos int) bool) {
	gap := s.ini
	for pos := s.ini; pos < s.end; pos++ {
		if in(pos) {
			if gap < pos {
				s.emit(gap, pos)
			}
			s.emit(pos, pos+1)
			gap = pos + 1
		}
	}
	if gap < s.end {
		s.emit(gap, s.end)
	}
}

// triples splits runs of ASCII digits into groups of three from the left
// (llama.cpp default pre-tokenizer's `[0-9][0-9][0-9]` pass).
func (s *splitter) triples() {
	digit := func(pos int) bool { r := s.c.r[pos]; return r >= '0' && r <= '9' }
	gap := s.ini
	for pos := s.ini; pos < s.end; {
		if pos+3 <= s.end && digit(pos) && digit(pos+1) && digit(pos+2) {
			if gap < pos {
				s.emit(gap, pos)
			}
			s.emit(pos, pos+3)
			pos += 3
			gap = pos
			continue
		}
		pos++
	}
	if gap < s.end {
		s.emit(gap, s.end)
	}
}

// preKind selects a pre-tokenizer.
type preKind int

const (
	preDefault preKind = iota
	preGPT2
	preQwen2
	preLlama3
	preQwen35     // Qwen3.5: the Qwen2 regex with \p{M} added to the letter classes
	preDigitsGPT2 // `\p{N}` then the GPT-2 regex (refact, starcoder, smollm, command-r, ...)
)

// split appends to words the byte ranges [start,end) of the pre-tokenized
// words of text (already sanitized); c is scratch space.
func split(kind preKind, text string, c *cpts, words [][2]int) [][2]int {
	c.load(text)
	n := len(c.r)
	emitWord := func(from, to int) { words = append(words, [2]int{c.off[from], c.off[to]}) }
	switch kind {
	case preGPT2:
		s := splitter{c: c, ini: 0, end: n, emit: emitWord}
		s.gpt2()
	case preQwen2:
		s := splitter{c: c, ini: 0, end: n, emit: emitWord}
		s.llama3(1)
	case preLlama3:
		s := splitter{c: c, ini: 0, end: n, emit: emitWord}
		s.llama3(3)
	case preQwen35:
		// `[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+` and `[^\s\p{L}\p{M}\p{N}]` treat a
		// combining mark exactly like a letter (a mark as the optional
		// prefix is absorbed by the letter run that must follow it), so
		// the Qwen2 splitter on marks reclassified as letters is the
		// Qwen3.5 regex.
		for i, r := range c.r {
			if c.cls[i] == clsOther && r >= 0x300 && unicode.Is(unicode.M, r) {
				c.cls[i] = clsLetter
			}
		}
		s := splitter{c: c, ini: 0, end: n, emit: emitWord}
		s.llama3(1)
	default:
		// Several passes, each splitting the pieces of the previous one.
		pieces := [][2]int{{0, n}}
		pass := func(f func(s *splitter)) {
			var out [][2]int
			for _, p := range pieces {
				s := splitter{c: c, ini: p[0], end: p[1], prev: p[0], emit: func(a, b int) { out = append(out, [2]int{a, b}) }}
				f(&s)
			}
			pieces = out
		}
		if kind == preDigitsGPT2 {
			pass(func(s *splitter) { s.singles(func(pos int) bool { return c.cls[pos] == clsNumber }) })
			pass(func(s *splitter) { s.gpt2() })
			for _, p := range pieces {
				emitWord(p[0], p[1])
			}
			break
		}
		pass(func(s *splitter) { s.runs(func(pos int) bool { return isPunctDefault(c.r[pos]) }) })
		pass(func(s *splitter) { s.gpt2() })
		pass(func(s *splitter) { s.runs(func(pos int) bool { return c.cls[pos] == clsNumber }) })
		pass(func(s *splitter) { s.triples() })
		for _, p := range pieces {
			emitWord(p[0], p[1])
		}
	}
	return words
}
