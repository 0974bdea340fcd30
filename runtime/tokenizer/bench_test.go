package tokenizer

import (
	"path/filepath"
	"testing"
)

func benchText(b *testing.B) string {
	var refs refFile
	readJSON(b, filepath.Join("testdata", "refs.json"), &refs)
	return refs.Cases[len(refs.Cases)-1].Text // validation.txt, 6.6 KB of KJV and Brown prose
}

// BenchmarkEncode measures steady-state throughput (word cache warm).
func BenchmarkEncode(b *testing.B) {
	for _, vocab := range []string{"gpt2-vocab.gguf", "qwen2-vocab.gguf"} {
		b.Run(vocab, func(b *testing.B) {
			tok := loadVocab(b, vocab)
			text := benchText(b)
			b.SetBytes(int64(len(text)))
			b.ReportAllocs()
			for b.Loop() {
				tok.Encode(text, false)
			}
		})
	}
}

// BenchmarkEncodeCold clears the word cache before every pass, so every
// word goes through the BPE merge loop.
func BenchmarkEncodeCold(b *testing.B) {
	tok := loadVocab(b, "gpt2-vocab.gguf")
	text := benchText(b)
	b.SetBytes(int64(len(text)))
	b.ReportAllocs()
	for b.Loop() {
		tok.mu.Lock()
		clear(tok.cache)
		tok.mu.Unlock()
		tok.Encode(text, false)
	}
}

func BenchmarkDecode(b *testing.B) {
	tok := loadVocab(b, "gpt2-vocab.gguf")
	text := benchText(b)
	ids := tok.Encode(text, false)
	b.SetBytes(int64(len(text)))
	b.ReportAllocs()
	for b.Loop() {
		tok.Decode(ids)
	}
}
