package tokenizer

import (
	"fmt"

	"github.com/lesfarm/lesfarm/runtime/gguf"
)

// FromGGUF builds the tokenizer described by the tokenizer.ggml.* metadata
// of f. Errors name the missing or malformed key.
func FromGGUF(f *gguf.File) (*Tokenizer, error) {
	var cfg Config
	var err error
	if cfg.Model, err = f.String("tokenizer.ggml.model"); err != nil {
		return nil, fmt.Errorf("tokenizer: %w", err)
	}
	if f.Has("tokenizer.ggml.pre") {
		if cfg.Pre, err = f.String("tokenizer.ggml.pre"); err != nil {
			return nil, fmt.Errorf("tokenizer: %w", err)
		}
	}
	if cfg.Tokens, err = f.Strings("tokenizer.ggml.tokens"); err != nil {
		return nil, fmt.Errorf("tokenizer: %w", err)
	}
	if f.Has("tokenizer.ggml.token_type") {
		if cfg.Types, err = f.Int32s("tokenizer.ggml.token_type"); err != nil {
			return nil, fmt.Errorf("tokenizer: %w", err)
		}
	}
	if f.Has("tokenizer.ggml.scores") {
		if cfg.Scores, err = f.Float32s("tokenizer.ggml.scores"); err != nil {
			return nil, fmt.Errorf("tokenizer: %w", err)
		}
		if len(cfg.Scores) < len(cfg.Tokens) {
			return nil, fmt.Errorf("tokenizer: %d scores for %d tokens", len(cfg.Scores), len(cfg.Tokens))
		}
	}
	if cfg.Model == "gpt2" {
		if cfg.Merges, err = f.Strings("tokenizer.ggml.merges"); err != nil {
			return nil, fmt.Errorf("tokenizer: %w", err)
		}
	}
	n := uint64(len(cfg.Tokens))
	id := func(key string, def int) (int, error) {
		if !f.Has(key) {
			return def, nil
		}
		v, err := f.Uint(key)
		if err != nil {
			return 0, fmt.Errorf("tokenizer: %w", err)
		}
		if v >= n {
			return def, nil // llama.cpp warns and keeps the default
		}
		return int(v), nil
	}
	defBOS, defEOS := -1, -1
	if cfg.Model == "llama" && n > 2 {
		defBOS, defEOS = 1, 2 // llama.cpp's SentencePiece defaults
	}
	if cfg.BOS, err = id("tokenizer.ggml.bos_token_id", defBOS); err != nil {
		return nil, err
	}
	if cfg.EOS, err = id("tokenizer.ggml.eos_token_id", defEOS); err != nil {
		return nil, err
	}
	for _, key := range []string{"tokenizer.ggml.eot_token_id", "tokenizer.ggml.eom_token_id"} {
		v, err := id(key, -1)
		if err != nil {
			return nil, err
		}
		if v >= 0 {
			cfg.ExtraEOG = append(cfg.ExtraEOG, v)
		}
	}
	if cfg.UNK, err = id("tokenizer.ggml.unknown_token_id", 0); err != nil {
		return nil, err
	}
	flag := func(key string, dst *bool) error {
		if !f.Has(key) {
			return nil
		}
		v, err := f.Bool(key)
		if err != nil {
			return fmt.Errorf("tokenizer: %w", err)
		}
		*dst = v
		return nil
	}
	if cfg.Model == "llama" {
		cfg.AddBOS = true // SentencePiece default in llama.cpp
	}
	if err := flag("tokenizer.ggml.add_bos_token", &cfg.AddBOS); err != nil {
		return nil, err
	}
	if err := flag("tokenizer.ggml.add_eos_token", &cfg.AddEOS); err != nil {
		return nil, err
	}
	if f.Has("tokenizer.ggml.add_space_prefix") {
		var v bool
		if err := flag("tokenizer.ggml.add_space_prefix", &v); err != nil {
			return nil, err
		}
		cfg.AddSpacePrefix = &v
	}
	return New(cfg)
}
