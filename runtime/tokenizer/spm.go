package tokenizer

import "fmt"

// spm is the SentencePiece tokenizer (tokenizer.ggml.model "llama").
type spm struct{}

func newSPM(t *Tokenizer, cfg Config) (*spm, error) {
	return nil, fmt.Errorf("tokenizer: SentencePiece (llama) vocabularies are not supported yet")
}

func (s *spm) encode(text string, out []int) []int { return out }
