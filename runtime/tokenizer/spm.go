package tokenizer

import (
	"fmt"
	"strings"
)

// spm is the SentencePiece tokenizer (tokenizer.ggml.model "llama"), as
// llama.cpp's llm_tokenizer_spm: spaces become U+2581, then adjacent
// symbols are merged greedily by the score of the merged token (highest
// first, leftmost on ties), and characters left outside the vocabulary fall
// back to <0xXX> byte tokens.
type spm struct {
	ids         map[string]int
	scores      []float32
	unk         int
	spacePrefix bool
	byteTok     [256]int
}

func newSPM(t *Tokenizer, cfg Config) (*spm, error) {
	s := &spm{ids: make(map[string]int, len(t.tokens)), unk: cfg.UNK, spacePrefix: true}
	if cfg.AddSpacePrefix != nil {
		s.spacePrefix = *cfg.AddSpacePrefix
	}
	if s.unk < 0 || s.unk >= len(t.tokens) {
		return nil, fmt.Errorf("tokenizer: unknown-token id %d outside the vocabulary of %d", s.unk, len(t.tokens))
	}
	s.scores = make([]float32, len(t.tokens))
	if cfg.Scores != nil {
		if len(cfg.Scores) < len(t.tokens) {
			return nil, fmt.Errorf("tokenizer: %d scores for %d tokens", len(cfg.Scores), len(t.tokens))
		}
		copy(s.scores, cfg.Scores)
	}
	for id, text := range t.tokens {
		s.ids[text] = id
	}
	for b := 0; b < 256; b++ {
		s.byteTok[b] = -1
		if id, ok := s.ids[fmt.Sprintf("<0x%02X>", b)]; ok {
			s.byteTok[b] = id
		} else if id, ok := s.ids[string([]byte{byte(b)})]; ok {
			s.byteTok[b] = id
		}
	}
	return s, nil
}

type spmBigram struct {
	score       float32
	left, right int32
	size        int32
}

func (a spmBigram) before(b spmBigram) bool {
	return a.score > b.score || a.score == b.score && a.left < b.left
}

type spmSym struct {
	start, n   int32
	prev, next int32
}

// encode tokenizes one raw-text fragment; prefix tells whether it starts
// the text or follows a special token (then a space is prepended when the
// model asks for add_space_prefix).
func (s *spm) encode(text string, prefix bool, out []int) []int {
	if s.spacePrefix && prefix {
		text = " " + text
	}
	text = strings.ReplaceAll(text, " ", "\u2581")
	var syms []spmSym
	for off := 0; off < len(text); {
		n := utf8Len(text[off])
		n = min(n, len(text)-off)
		next := int32(len(syms) + 1)
		if off+n == len(text) {
			next = -1
		}
		syms = append(syms, spmSym{start: int32(off), n: int32(n), prev: int32(len(syms) - 1), next: next})
		off += n
	}
	var queue []spmBigram
	push := func(g spmBigram) {
		queue = append(queue, g)
		for i := len(queue) - 1; i > 0; {
			p := (i - 1) / 2
			if !queue[i].before(queue[p]) {
				break
			}
			queue[i], queue[p] = queue[p], queue[i]
			i = p
		}
	}
	pop := func() spmBigram {
		top := queue[0]
		last := len(queue) - 1
		queue[0] = queue[last]
		queue = queue[:last]
		for i := 0; ; {
			l, r, m := 2*i+1, 2*i+2, i
			if l < len(queue) && queue[l].before(queue[m]) {
				m = l
			}
			if r < len(queue) && queue[r].before(queue[m]) {
				m = r
			}
			if m == i {
				break
			}
			queue[i], queue[m] = queue[m], queue[i]
			i = m
		}
		return top
	}
	tryAdd := func(left, right int32) {
		if left < 0 || right < 0 {
			return
		}
		a := syms[left]
		size := a.n + syms[right].n
		id, ok := s.ids[text[a.start:a.start+size]]
		if !ok {
			return
		}
		push(spmBigram{score: s.scores[id], left: left, right: right, size: size})
	}
	for i := 1; i < len(syms); i++ {
		tryAdd(int32(i-1), int32(i))
	}
	for len(queue) > 0 {
		g := pop()
		l, r := &syms[g.left], &syms[g.right]
		if l.n == 0 || r.n == 0 || l.n+r.n != g.size {
			continue
		}
		l.n += r.n
		r.n = 0
		l.next = r.next
		if r.next >= 0 {
			syms[r.next].prev = g.left
		}
		tryAdd(l.prev, g.left)
		tryAdd(g.left, l.next)
	}
	for i := int32(0); i != -1 && len(syms) > 0; i = syms[i].next {
		sym := syms[i]
		piece := text[sym.start : sym.start+sym.n]
		if id, ok := s.ids[piece]; ok {
			out = append(out, id)
			continue
		}
		for j := 0; j < len(piece); j++ {
			if id := s.byteTok[piece[j]]; id >= 0 {
				out = append(out, id)
			} else {
				out = append(out, s.unk) // llama.cpp throws here (vocab without byte tokens)
			}
		}
	}
	return out
}

// utf8Len is llama.cpp's unicode_len_utf8: the sequence length announced by
// a lead byte (1 for a stray continuation byte).
func utf8Len(c byte) int {
	return [16]int{1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 3, 4}[c>>4]
}
