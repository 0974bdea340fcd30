package tokenizer

import (
	"strings"
	"testing"
)

// FuzzConfig builds tokenizers from arbitrary vocabularies (as a hostile
// GGUF could hold them: empty, duplicate or invalid-UTF-8 tokens, merges
// without a space, odd types) and encodes arbitrary text with them. New may
// refuse a config, but nothing may panic and every id must be in range.
func FuzzConfig(f *testing.F) {
	f.Add("a\x00b\x00ab\x00Ġ\x00<|x|>", "a b\x00Ġ a\x00 \x00ab", []byte{1, 1, 1, 1, 3}, "ab <|x|> a", "gpt2", "qwen2")
	f.Add("\x00\x00\xff\x00<0x41>", "\xff \xff", []byte{4, 6, 2}, "\xff\xffA", "llama", "")
	f.Add("<s>\x00▁h\x00h\x00▁", "", []byte{3}, "h h", "llama", "default")
	f.Fuzz(func(t *testing.T, tokens, merges string, types []byte, text, model, pre string) {
		cfg := Config{Model: model, Pre: pre, Tokens: strings.Split(tokens, "\x00"), BOS: -1, EOS: -1}
		if merges != "" {
			cfg.Merges = strings.Split(merges, "\x00")
		}
		if len(types) >= len(cfg.Tokens) {
			cfg.Types = make([]int32, len(cfg.Tokens))
			for i := range cfg.Types {
				cfg.Types[i] = int32(types[i] % 8)
			}
		}
		if len(types) > 0 && int(types[0]) < len(cfg.Tokens) {
			cfg.EOS = int(types[0])
		}
		tok, err := New(cfg)
		if err != nil {
			return
		}
		for _, special := range []bool{false, true} {
			for _, id := range tok.Encode(text, special) {
				if id < 0 || id >= tok.VocabSize() {
					t.Fatalf("id %d out of range %d", id, tok.VocabSize())
				}
			}
		}
		_ = tok.Decode([]int{-1, 0, tok.VocabSize(), tok.VocabSize() - 1})
	})
}
