package model

import (
	"fmt"

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

// addByteBPE adds a GPT-2 style byte-level BPE tokenizer of vocab tokens
// (byteBPE) with <|endoftext|> as bos/eos.
func addByteBPE(gw *gguf.Writer, vocab int, seed uint64, pre string) error {
	tokens, merges, types, err := byteBPE(vocab, seed)
	if err != nil {
		return err
	}
	eos := uint32(len(tokens) - 1)
	for _, p := range []struct {
		k string
		v any
	}{
		{"tokenizer.ggml.model", "gpt2"},
		{"tokenizer.ggml.pre", pre},
		{"tokenizer.ggml.tokens", tokens},
		{"tokenizer.ggml.token_type", types},
		{"tokenizer.ggml.merges", merges},
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
// byte tokens in GPT-2 order, vocab-257 merges of letter tokens (each
// merge's operands precede it, so the BPE is closed), and <|endoftext|>
// last (type 3, control); every other token is type 1.
func byteBPE(vocab int, seed uint64) (tokens, merges []string, types []int32, err error) {
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
	space := string(runes[indexOf(runes, 'Ġ')])
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
