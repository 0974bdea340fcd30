package tokenizer

import (
	"strings"
	"unicode/utf8"
)

// byteToRune is GPT-2's bytes_to_unicode: printable Latin-1 bytes map to
// themselves, the other 68 bytes to U+0100 onwards in byte order.
var byteToRune, runeToByte = func() ([256]rune, map[rune]byte) {
	var b2r [256]rune
	r2b := make(map[rune]byte, 256)
	n := 0
	for b := 0; b < 256; b++ {
		if b >= 0x21 && b <= 0x7e || b >= 0xa1 && b <= 0xac || b >= 0xae && b <= 0xff {
			b2r[b] = rune(b)
		} else {
			b2r[b] = rune(256 + n)
			n++
		}
		r2b[b2r[b]] = byte(b)
	}
	return b2r, r2b
}()

// encodeBytes maps raw bytes to their GPT-2 unicode form (how vocab and
// merge strings are stored).
func encodeBytes(raw string) string {
	var sb strings.Builder
	sb.Grow(len(raw) * 2)
	for i := 0; i < len(raw); i++ {
		sb.WriteRune(byteToRune[raw[i]])
	}
	return sb.String()
}

// decodeBytes maps a GPT-2 unicode string back to raw bytes; ok is false
// when it holds a character outside the 256 byte symbols.
func decodeBytes(s string) (string, bool) {
	b := make([]byte, 0, len(s))
	for _, r := range s {
		c, ok := runeToByte[r]
		if !ok || r == utf8.RuneError {
			return "", false
		}
		b = append(b, c)
	}
	return string(b), true
}

// bpe is the merge engine. Symbols are raw byte strings interned to ids:
// every vocabulary token that is made of byte symbols, every merge operand
// and every merge result. A merge is keyed by the (left, right) symbol pair,
// which is what llama.cpp's bpe_ranks keys by text.
type bpe struct {
	sym      map[string]int32 // raw bytes -> symbol id
	symToken []int32          // symbol id -> token id, or -1 when not in the vocabulary
	symText  []string         // symbol id -> raw bytes
	byteSym  [256]int32       // symbol of each single byte
	merges   map[uint64]merge
	single   [256]int32 // token whose *encoded* text is this single byte (llama.cpp's fallback), or -1
}

type merge struct {
	rank   int32
	result int32
}

func (b *bpe) intern(raw string) int32 {
	if id, ok := b.sym[raw]; ok {
		return id
	}
	id := int32(len(b.symText))
	b.sym[raw] = id
	b.symText = append(b.symText, raw)
	b.symToken = append(b.symToken, -1)
	return id
}

func newBPE(tokens []string, merges []string) *bpe {
	b := &bpe{sym: make(map[string]int32, len(tokens)+len(merges)), merges: make(map[uint64]merge, len(merges))}
	for i := range b.single {
		b.single[i] = -1
	}
	for id, text := range tokens {
		if len(text) == 1 {
			b.single[text[0]] = int32(id)
		}
		raw, ok := decodeBytes(text)
		if !ok {
			continue // cannot come out of byte-level BPE; matched only as a special token
		}
		b.symToken[b.intern(raw)] = int32(id) // later duplicates win, like llama.cpp's token_to_id
	}
	for c := 0; c < 256; c++ {
		b.byteSym[c] = b.intern(string([]byte{byte(c)}))
	}
	for rank, m := range merges {
		// llama.cpp splits at the first space after the first byte.
		sp := strings.IndexByte(m[min(1, len(m)):], ' ')
		var first, second string
		if sp >= 0 {
			sp += min(1, len(m))
			first, second = m[:sp], m[sp+1:]
		}
		l, ok1 := decodeBytes(first)
		r, ok2 := decodeBytes(second)
		if !ok1 || !ok2 || l == "" || r == "" {
			continue // can never match two byte-level symbols
		}
		li, ri := b.intern(l), b.intern(r)
		key := uint64(uint32(li))<<32 | uint64(uint32(ri))
		if _, dup := b.merges[key]; dup {
			continue // llama.cpp's emplace keeps the first rank
		}
		b.merges[key] = merge{rank: int32(rank), result: b.intern(l + r)}
	}
	return b
}

// symbol is one node of the doubly linked list of a word's symbols.
type symbol struct {
	sym        int32
	prev, next int32
	alive      bool
}

// bigram is a candidate merge of two adjacent symbols.
type bigram struct {
	rank        int32
	left, right int32
	lsym, rsym  int32
	result      int32
}

func (a bigram) less(b bigram) bool {
	return a.rank < b.rank || a.rank == b.rank && a.left < b.left
}

// session holds scratch space for encoding one word at a time.
type session struct {
	syms  []symbol
	queue []bigram
}

func (s *session) push(g bigram) {
	s.queue = append(s.queue, g)
	q := s.queue
	i := len(q) - 1
	for i > 0 {
		p := (i - 1) / 2
		if !q[i].less(q[p]) {
			break
		}
		q[i], q[p] = q[p], q[i]
		i = p
	}
}

func (s *session) pop() bigram {
	q := s.queue
	top := q[0]
	last := len(q) - 1
	q[0] = q[last]
	q = q[:last]
	for i := 0; ; {
		l, r, m := 2*i+1, 2*i+2, i
		if l < len(q) && q[l].less(q[m]) {
			m = l
		}
		if r < len(q) && q[r].less(q[m]) {
			m = r
		}
		if m == i {
			break
		}
		q[i], q[m] = q[m], q[i]
		i = m
	}
	s.queue = q
	return top
}

func (b *bpe) addBigram(s *session, left, right int32) {
	if left < 0 || right < 0 {
		return
	}
	ls, rs := s.syms[left].sym, s.syms[right].sym
	m, ok := b.merges[uint64(uint32(ls))<<32|uint64(uint32(rs))]
	if !ok {
		return
	}
	s.push(bigram{rank: m.rank, left: left, right: right, lsym: ls, rsym: rs, result: m.result})
}

// encodeWord appends the tokens of one pre-tokenized word (raw bytes) to
// out, merging by rank exactly as llama.cpp's llm_tokenizer_bpe_session.
func (b *bpe) encodeWord(s *session, word string, out []int32) []int32 {
	s.syms = s.syms[:0]
	s.queue = s.queue[:0]
	for i := 0; i < len(word); i++ {
		next := int32(i + 1)
		if i == len(word)-1 {
			next = -1
		}
		s.syms = append(s.syms, symbol{sym: b.byteSym[word[i]], prev: int32(i - 1), next: next, alive: true})
	}
	for i := 1; i < len(s.syms); i++ {
		b.addBigram(s, int32(i-1), int32(i))
	}
	for len(s.queue) > 0 {
		g := s.pop()
		l, r := &s.syms[g.left], &s.syms[g.right]
		if !l.alive || !r.alive || l.sym != g.lsym || r.sym != g.rsym {
			continue // outdated
		}
		l.sym = g.result
		r.alive = false
		l.next = r.next
		if r.next >= 0 {
			s.syms[r.next].prev = g.left
		}
		b.addBigram(s, l.prev, g.left)
		b.addBigram(s, g.left, l.next)
	}
	for i := range s.syms {
		if !s.syms[i].alive {
			continue
		}
		sym := s.syms[i].sym
		if tok := b.symToken[sym]; tok >= 0 {
			out = append(out, tok)
			continue
		}
		// Not in the vocabulary: llama.cpp looks up each byte of the
		// GPT-2-encoded text as a one-byte token and drops the misses.
		enc := encodeBytes(b.symText[sym])
		for j := 0; j < len(enc); j++ {
			if t := b.single[enc[j]]; t >= 0 {
				out = append(out, t)
			}
		}
	}
	return out
}
