package model

import (
	"fmt"
	"regexp"

	"github.com/lesfarm/lesfarm/runtime/gguf"
)

// bytesToUnicode is GPT-2's byte ↔ printable rune table: token i of a
// byte-level BPE vocabulary is byte order[i], spelled rune runes[i].
func bytesToUnicode() (order []byte, runes []rune) {
	in := [256]bool{}
	for b := '!'; b <= '~'; b++ {
		order, runes = append(order, byte(b)), append(runes, b)
		in[b] = true
	}
	for b := '¡'; b <= '¬'; b++ {
		order, runes = append(order, byte(b)), append(runes, b)
		in[b] = true
	}
	for b := '®'; b <= 'ÿ'; b++ {
		order, runes = append(order, byte(b)), append(runes, b)
		in[b] = true
	}
	n := 0
	for b := range 256 {
		if !in[b] {
			order, runes = append(order, byte(b)), append(runes, rune(256+n))
			n++
		}
	}
	return order, runes
}

// synthVocab is a byte-level BPE vocabulary (byteBPE).
type synthVocab struct {
	tokens, merges []string
	types          []int32
}

// vocabulary returns the model's tokenizer vocabulary: byteBPE with its
// first merges learnt from the calibration text, for every routing
// preset. The tokenizer is not a routing property: English splits into
// word pieces as a trained BPE vocabulary splits it (fine-grained-moe's
// layer 0, which routes on the token alone, is then not dominated by a
// few single letters), and files of the same geometry have the same size
// whatever their routing.
func (c *SynthConfig) vocabulary() (synthVocab, error) {
	tokens, merges, types, err := byteBPE(c.Vocab, c.Seed, calibrationText)
	return synthVocab{tokens, merges, types}, err
}

// pretokenizer is the tokenizer.ggml.pre the model is written with.
func (c *SynthConfig) pretokenizer() string {
	if c.Arch == "qwen35moe" {
		return "qwen35"
	}
	return "gpt-2"
}

// addByteBPE adds the GPT-2 style byte-level BPE tokenizer v with
// <|endoftext|> (its last token) as bos/eos.
func addByteBPE(gw *gguf.Writer, v synthVocab, pre string) error {
	eos := uint32(len(v.tokens) - 1)
	for _, p := range []struct {
		k string
		v any
	}{
		{"tokenizer.ggml.model", "gpt2"},
		{"tokenizer.ggml.pre", pre},
		{"tokenizer.ggml.tokens", v.tokens},
		{"tokenizer.ggml.token_type", v.types},
		{"tokenizer.ggml.merges", v.merges},
		{"tokenizer.ggml.bos_token_id", eos},
		{"tokenizer.ggml.eos_token_id", eos},
		{"tokenizer.ggml.padding_token_id", eos},
		{"tokenizer.ggml.add_bos_token", false},
	} {
		if err := gw.AddKV(p.k, p.v); err != nil {
			return err
		}
	}
	return nil
}

// byteBPE returns a byte-level BPE vocabulary of vocab tokens: the 256
// byte tokens in GPT-2 order, vocab-257 merges (each merge's operands
// precede it, so the BPE is closed), and <|endoftext|> last (type 3,
// control); every other token is type 1. With a corpus the first merges
// are learnt from it (learnMerges), then a space before each punctuation
// byte; the rest are random merges of letter tokens.
func byteBPE(vocab int, seed uint64, corpus string) (tokens, merges []string, types []int32, err error) {
	_, runes := bytesToUnicode()
	tokens = make([]string, 0, vocab)
	seen := map[string]bool{}
	var letters, words []string // merge operands: "ab", "Ġab"
	for _, r := range runes {
		s := string(r)
		tokens = append(tokens, s)
		seen[s] = true
		if r >= 'a' && r <= 'z' {
			letters = append(letters, s)
			words = append(words, s)
		}
	}
	merges = make([]string, 0, vocab-257)
	add := func(a, b string) bool {
		s := a + b
		if seen[s] || len([]rune(s)) > 12 {
			return false
		}
		seen[s] = true
		tokens = append(tokens, s)
		merges = append(merges, a+" "+b)
		return true
	}
	space := string(runes[indexOf(runes, 'Ġ')])
	if corpus != "" {
		learnMerges(corpus, runes, func(a, b string) bool {
			if len(tokens) >= vocab-1 {
				return false
			}
			add(a, b) // a token spelled already, or too long, is left out
			return true
		})
		// A space before punctuation is one piece of the pre-tokenizer,
		// as in GPT-2's vocabulary, whether or not the corpus has it.
		for _, r := range fgPunct { // printable ASCII spells itself
			if len(tokens) < vocab-1 {
				add(space, string(r))
			}
		}
	}
	// Space-prefixed letters first, as GPT-2's early merges are.
	for _, l := range letters {
		if len(tokens) < vocab-1 && add(space, l) {
			words = append(words, space+l)
		}
	}
	g := newRNG(seed, "tokenizer")
	for tries := 0; len(tokens) < vocab-1 && tries < 100*vocab; tries++ {
		a := words[g.next()%uint64(len(words))]
		b := letters[g.next()%uint64(len(letters))]
		if len(words) > 64 && g.next()%2 == 0 {
			// Extend with longer pieces too.
			if w := words[g.next()%uint64(len(words))]; w[0] != space[0] {
				b = w
			}
		}
		if add(a, b) {
			words = append(words, a+b)
		}
	}
	if len(tokens) < vocab-1 {
		return nil, nil, nil, fmt.Errorf("synth: could not build %d distinct merges", vocab-257)
	}
	tokens = append(tokens, "<|endoftext|>")
	types = make([]int32, len(tokens))
	for i := range types {
		types[i] = 1
	}
	types[len(types)-1] = 3
	return tokens, merges, types, nil
}

func indexOf(rs []rune, r rune) int {
	for i, x := range rs {
		if x == r {
			return i
		}
	}
	return -1
}

// preToken splits text as GPT-2's pre-tokenizer does (near enough for
// learning merges: a merge never crosses a piece).
var preToken = regexp.MustCompile(`'(?:s|t|re|ve|m|ll|d)| ?\pL+| ?\pN+| ?[^\s\pL\pN]+|\s+`)

// fgPunct are the bytes that byteBPE merges with a leading space when it
// learns merges from a corpus.
const fgPunct = "!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~"

// fgMergeMin is the fewest occurrences in the corpus of a pair that
// learnMerges merges.
const fgMergeMin = 2

// learnMerges learns byte-level BPE merges from corpus, as a BPE trainer
// does: it merges the corpus's most frequent adjacent pair of tokens
// (within a pre-token piece; ties to the lexically first) until add
// returns false or no pair occurs fgMergeMin times. runes spells each byte
// (bytesToUnicode).
func learnMerges(corpus string, runes []rune, add func(a, b string) bool) {
	order, _ := bytesToUnicode()
	spell := map[byte]string{}
	for i, b := range order {
		spell[b] = string(runes[i])
	}
	count := map[string]int{}
	for _, w := range preToken.FindAllString(corpus, -1) {
		count[w]++
	}
	type word struct {
		syms []string
		n    int
	}
	words := make([]word, 0, len(count))
	for w, n := range count {
		syms := make([]string, len(w))
		for i := range len(w) {
			syms[i] = spell[w[i]]
		}
		words = append(words, word{syms, n})
	}
	for {
		pairs := map[[2]string]int{}
		for _, w := range words {
			for i := 1; i < len(w.syms); i++ {
				pairs[[2]string{w.syms[i-1], w.syms[i]}] += w.n
			}
		}
		var best [2]string
		bestN := 0
		for p, n := range pairs {
			if n > bestN || n == bestN && p[0]+" "+p[1] < best[0]+" "+best[1] {
				best, bestN = p, n
			}
		}
		if bestN < fgMergeMin {
			return
		}
		if !add(best[0], best[1]) {
			return
		}
		for i := range words {
			s := words[i].syms
			out := s[:0]
			for j := 0; j < len(s); j++ {
				if j+1 < len(s) && s[j] == best[0] && s[j+1] == best[1] {
					out = append(out, best[0]+best[1])
					j++
				} else {
					out = append(out, s[j])
				}
			}
			words[i].syms = out
		}
	}
}
