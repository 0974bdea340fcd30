// Package tokenizer implements the tokenizers of GGUF models, matching
// llama.cpp token for token: byte-level BPE (tokenizer.ggml.model "gpt2")
// with the gpt-2, qwen2, llama3 and default pre-tokenizers, and
// SentencePiece-style BPE ("llama").
//
// A Tokenizer is safe for concurrent use.
package tokenizer

import (
	"fmt"
	"sort"
	"strconv"
	"strings"
	"sync"
)

// Token types as stored in tokenizer.ggml.token_type (llama_token_type).
const (
	TypeUndefined   = 0
	TypeNormal      = 1
	TypeUnknown     = 2
	TypeControl     = 3
	TypeUserDefined = 4
	TypeUnused      = 5
	TypeByte        = 6
)

// Token attributes (llama_token_attr): llama.cpp derives them from the
// types and then adjusts a few by token text.
const (
	attrUndefined   = 1 << 0
	attrUnknown     = 1 << 1
	attrUnused      = 1 << 2
	attrNormal      = 1 << 3
	attrControl     = 1 << 4
	attrUserDefined = 1 << 5
	attrByte        = 1 << 6
)

// Config describes a vocabulary, as read from tokenizer.ggml.* metadata.
// Options must not be modified after New.
type Config struct {
	Model  string    // tokenizer.ggml.model: "gpt2" (byte-level BPE) or "llama" (SentencePiece)
	Pre    string    // tokenizer.ggml.pre: "gpt-2", "qwen2", "qwen35", "llama3", "default" ("" means default)
	Tokens []string  // token texts, as stored (GPT-2 byte-encoded for gpt2)
	Types  []int32   // token types (1 normal, 2 unknown, 3 control, 4 user-defined, 5 unused, 6 byte); nil means all normal
	Merges []string  // BPE merges "a b", by rank (gpt2)
	Scores []float32 // token scores (llama)
	BOS    int       // -1 when absent
	EOS    int       // -1 when absent
	// ExtraEOG lists more end-of-generation ids (tokenizer.ggml.eot_token_id, eom_token_id).
	ExtraEOG []int
	UNK      int // unknown token (llama only; FromGGUF uses 0 when absent, as llama.cpp)
	AddBOS   bool
	AddEOS   bool
	// AddSpacePrefix is tokenizer.ggml.add_space_prefix (llama only; default true there).
	AddSpacePrefix *bool
}

// Tokenizer encodes text to token ids and back. It is safe for concurrent use.
type Tokenizer struct {
	model        string
	pre          preKind
	ignoreMerges bool
	tokens       []string
	attrs        []uint32
	bos          int
	eos          int
	addBOS       bool
	addEOS       bool
	eog          map[int]bool
	pieces       []string // decoded piece of each token (special tokens as their text)
	special      []int    // control/user-defined/unknown tokens, longest text first

	bpe *bpe
	spm *spm

	mu    sync.Mutex
	cache map[string][]int32
	pool  sync.Pool // *scratch
}

type scratch struct {
	sess  session
	c     cpts
	words [][2]int
	out   []int32
}

// cacheLimit bounds the per-word cache; it is cleared when full.
const cacheLimit = 1 << 16

// eogTexts are the token texts llama.cpp treats as end of generation.
var eogTexts = map[string]bool{
	"<|eot_id|>": true, "<|im_end|>": true, "<|end|>": true, "<|return|>": true, "<|call|>": true,
	"<|flush|>": true, "<|calls|>": true, "<end_of_turn>": true, "<|endoftext|>": true, "</s>": true,
	"<|eom_id|>": true, "<EOT>": true, "_<EOT>": true, "[EOT]": true, "[EOS]": true,
	"<|end_of_text|>": true, "<end_of_utterance>": true, "<eos>": true, "<turn|>": true, "<|tool_response>": true,
}

// controlTexts are the texts llama.cpp forces to control type (EOT, EOM and
// FIM candidates).
var controlTexts = map[string]bool{
	"<|fim_prefix|>": true, "<fim-prefix>": true, "<fim_prefix>": true, "<PRE>": true, "<|code_prefix|>": true, "<|prefix|>": true,
	"<|fim_suffix|>": true, "<fim-suffix>": true, "<fim_suffix>": true, "<SUF>": true, "<|code_suffix|>": true, "<|suffix|>": true,
	"<|fim_middle|>": true, "<fim-middle>": true, "<fim_middle>": true, "<MID>": true, "<|code_middle|>": true, "<|middle|>": true,
	"<|fim_pad|>": true, "<fim-pad>": true, "<fim_pad>": true, "<PAD>": true, "[PAD]": true,
	"<|fim_repo|>": true, "<|repo_name|>": true, "<fim-repo>": true, "<REPO>": true, "<reponame>": true,
	"<|file_sep|>": true,
}

// fimEOGTexts are the FIM pad/repo/separator texts, which end generation.
var fimEOGTexts = map[string]bool{
	"<|fim_pad|>": true, "<fim-pad>": true, "<fim_pad>": true, "<PAD>": true, "[PAD]": true,
	"<|fim_repo|>": true, "<|repo_name|>": true, "<fim-repo>": true, "<REPO>": true, "<reponame>": true,
	"<|file_sep|>": true,
}

func parsePre(model, pre string) (preKind, bool, error) {
	switch pre {
	case "", "default":
		return preDefault, false, nil
	case "gpt-2", "gpt2", "mpt", "olmo", "jais", "trillion", "granite-docling":
		return preGPT2, false, nil
	case "qwen2", "stablelm2", "hunyuan":
		return preQwen2, false, nil
	case "qwen35":
		return preQwen35, false, nil
	case "llama3", "llama-v3", "llama-bpe", "falcon3", "pixtral":
		return preLlama3, true, nil
	case "dbrx", "smaug-bpe":
		return preLlama3, false, nil
	case "refact", "starcoder", "command-r", "smollm", "codeshell", "exaone", "minerva-7b":
		return preDigitsGPT2, false, nil
	}
	return 0, false, fmt.Errorf("tokenizer: unsupported pre-tokenizer %q for model %q (supported: default, gpt-2, qwen2, qwen35, llama3, refact and their aliases)", pre, model)
}

// New builds a tokenizer from cfg.
func New(cfg Config) (*Tokenizer, error) {
	n := len(cfg.Tokens)
	if n == 0 {
		return nil, fmt.Errorf("tokenizer: empty vocabulary")
	}
	if cfg.Types != nil && len(cfg.Types) < n {
		return nil, fmt.Errorf("tokenizer: %d token types for %d tokens", len(cfg.Types), n)
	}
	t := &Tokenizer{model: cfg.Model, bos: cfg.BOS, eos: cfg.EOS, addBOS: cfg.AddBOS, addEOS: cfg.AddEOS, cache: map[string][]int32{}}
	t.tokens = make([]string, n)
	for i, s := range cfg.Tokens {
		if s == "" {
			s = "[EMPTY_" + strconv.Itoa(i) + "]" // as llama.cpp
		}
		t.tokens[i] = s
	}
	for _, id := range []*int{&t.bos, &t.eos} {
		if *id >= n {
			return nil, fmt.Errorf("tokenizer: special token id %d outside the vocabulary of %d", *id, n)
		}
	}
	if t.addBOS && t.bos < 0 {
		return nil, fmt.Errorf("tokenizer: add_bos_token is set but there is no BOS token")
	}
	if t.addEOS && t.eos < 0 {
		return nil, fmt.Errorf("tokenizer: add_eos_token is set but there is no EOS token")
	}
	t.attrs = make([]uint32, n)
	for i := range t.attrs {
		typ := int32(TypeNormal)
		if cfg.Types != nil {
			typ = cfg.Types[i]
		}
		switch typ {
		case TypeUnknown:
			t.attrs[i] = attrUnknown
		case TypeUnused:
			t.attrs[i] = attrUnused
		case TypeNormal:
			t.attrs[i] = attrNormal
		case TypeControl:
			t.attrs[i] = attrControl
		case TypeUserDefined:
			t.attrs[i] = attrUserDefined
		case TypeByte:
			t.attrs[i] = attrByte
		default:
			t.attrs[i] = attrUndefined
		}
	}

	// End-of-generation tokens and control fix-ups, by text as llama.cpp does.
	t.eog = map[int]bool{}
	for i, s := range t.tokens {
		if eogTexts[s] || controlTexts[s] {
			t.attrs[i] |= attrControl
		}
		if eogTexts[s] || fimEOGTexts[s] {
			t.eog[i] = true
		}
	}
	for _, id := range append([]int{cfg.EOS}, cfg.ExtraEOG...) {
		if id >= 0 && id < n {
			t.eog[id] = true
		}
	}
	has := func(text string) (int, bool) {
		for id := range t.eog {
			if t.tokens[id] == text {
				return id, true
			}
		}
		return 0, false
	}
	_, ret := has("<|return|>")
	_, call := has("<|call|>")
	_, calls := has("<|calls|>")
	_, flush := has("<|flush|>")
	if end, ok := has("<|end|>"); ok && (ret && call || (call || calls) && flush) {
		delete(t.eog, end)
		t.attrs[end] = attrUserDefined
	}
	if _, ok := has("<|tool_response>"); ok {
		if s, ok := has("</s>"); ok {
			delete(t.eog, s)
			t.attrs[s] = attrNormal
		}
	}

	var err error
	switch cfg.Model {
	case "gpt2":
		if t.pre, t.ignoreMerges, err = parsePre(cfg.Model, cfg.Pre); err != nil {
			return nil, err
		}
		t.bpe = newBPE(t.tokens, cfg.Merges)
	case "llama":
		if t.spm, err = newSPM(t, cfg); err != nil {
			return nil, err
		}
	default:
		return nil, fmt.Errorf("tokenizer: unsupported tokenizer model %q (supported: gpt2, llama)", cfg.Model)
	}

	for i, a := range t.attrs {
		if a&(attrControl|attrUserDefined|attrUnknown) != 0 {
			t.special = append(t.special, i)
		}
	}
	sort.SliceStable(t.special, func(a, b int) bool { return len(t.tokens[t.special[a]]) > len(t.tokens[t.special[b]]) })

	t.pieces = make([]string, n)
	for i := range t.pieces {
		t.pieces[i] = t.piece(i)
	}
	t.pool.New = func() any { return new(scratch) }
	return t, nil
}

// piece computes the text of token id as llama.cpp's token_to_piece with
// special rendering on.
func (t *Tokenizer) piece(id int) string {
	text, a := t.tokens[id], t.attrs[id]
	if a&(attrUnknown|attrControl|attrUserDefined) != 0 {
		return text
	}
	if a&attrNormal != 0 {
		if t.spm != nil {
			return strings.ReplaceAll(text, "\u2581", " ")
		}
		if raw, ok := decodeBytes(text); ok {
			return raw
		}
		// Characters outside the byte map pass through (llama.cpp prints an [UNK_BYTE_...] marker).
		var b []byte
		for _, r := range text {
			if c, ok := runeToByte[r]; ok {
				b = append(b, c)
			} else {
				b = append(b, string(r)...)
			}
		}
		return string(b)
	}
	if a&attrByte != 0 {
		if c, ok := byteToken(text); ok {
			return string([]byte{c})
		}
	}
	return ""
}

// byteToken parses a "<0xXX>" byte token.
func byteToken(text string) (byte, bool) {
	if len(text) != 6 || !strings.HasPrefix(text, "<0x") || text[5] != '>' {
		return 0, false
	}
	v, err := strconv.ParseUint(text[3:5], 16, 8)
	return byte(v), err == nil
}

// AppendPiece appends the bytes of token id to dst (nothing for an id
// outside the vocabulary), for callers that stream generated text.
func (t *Tokenizer) AppendPiece(dst []byte, id int) []byte {
	return append(dst, t.Piece(id)...)
}

// Model returns tokenizer.ggml.model ("gpt2" or "llama").
func (t *Tokenizer) Model() string { return t.model }

// AddBOS reports whether Encode prepends the BOS token.
func (t *Tokenizer) AddBOS() bool { return t.addBOS }

// VocabSize returns the number of tokens.
func (t *Tokenizer) VocabSize() int { return len(t.tokens) }

// BOS returns the beginning-of-sequence token, or -1.
func (t *Tokenizer) BOS() int { return t.bos }

// EOS returns the end-of-sequence token, or -1.
func (t *Tokenizer) EOS() int { return t.eos }

// IsEOG reports whether id ends generation (EOS, EOT, EOM and the texts
// llama.cpp recognises, such as <|im_end|> and <|endoftext|>).
func (t *Tokenizer) IsEOG(id int) bool { return t.eog[id] }

// IsControl reports whether id is a control token.
func (t *Tokenizer) IsControl(id int) bool {
	return id >= 0 && id < len(t.attrs) && t.attrs[id]&attrControl != 0
}

// Piece returns the bytes token id stands for; control and other special
// tokens render as their text. It returns "" for an id outside the
// vocabulary.
func (t *Tokenizer) Piece(id int) string {
	if id < 0 || id >= len(t.pieces) {
		return ""
	}
	return t.pieces[id]
}

// Decode concatenates the pieces of ids (special tokens as their text, ids
// outside the vocabulary skipped). Unlike llama.cpp's detokenize it applies
// no clean-up of spaces, so Decode(Encode(s)) == s for valid UTF-8 s
// (SentencePiece: after the BOS text, and with the space prefix removed
// from the text after the start and after each special token). The result
// may end inside a multi-byte character when ids stop mid-character.
func (t *Tokenizer) Decode(ids []int) string {
	var sb strings.Builder
	strip := t.spm != nil && t.spm.spacePrefix
	prevSpecial := true
	for _, id := range ids {
		p := t.Piece(id)
		special := id >= 0 && id < len(t.attrs) && t.attrs[id]&(attrControl|attrUserDefined|attrUnknown) != 0
		if strip && prevSpecial && !special && p != "" {
			p = strings.TrimPrefix(p, " ")
			prevSpecial = false
		} else if p != "" || special {
			prevSpecial = special
		}
		sb.WriteString(p)
	}
	return sb.String()
}

// Encode tokenizes text with BOS/EOS added as the model asks (llama.cpp's
// add_special = true). With parseSpecial, control tokens written in the text
// (e.g. "<|im_start|>") become their ids; user-defined tokens always do.
func (t *Tokenizer) Encode(text string, parseSpecial bool) []int {
	return t.Tokenize(text, true, parseSpecial)
}

// Tokenize is Encode with add_special chosen by the caller.
func (t *Tokenizer) Tokenize(text string, addSpecial, parseSpecial bool) []int {
	var out []int
	if addSpecial && t.addBOS {
		out = append(out, t.bos)
	}
	sc := t.pool.Get().(*scratch)
	defer t.pool.Put(sc)
	prevSpecial := true // SentencePiece prefixes a space at the start and after special tokens
	for _, f := range t.partition(text, parseSpecial) {
		if f.token >= 0 {
			out = append(out, f.token)
			prevSpecial = true
			continue
		}
		if t.spm != nil {
			out = t.spm.encode(text[f.start:f.end], prevSpecial, out)
		} else {
			out = t.encodeText(sc, text[f.start:f.end], out)
		}
		prevSpecial = false
	}
	if addSpecial && t.addEOS {
		out = append(out, t.eos)
	}
	return out
}

// fragment is either a special token or a span of raw text.
type fragment struct {
	token      int // -1 for text
	start, end int
}

// partition splits text at special-token texts, longest tokens first, as
// llama.cpp's tokenizer_st_partition.
func (t *Tokenizer) partition(text string, parseSpecial bool) []fragment {
	if text == "" {
		return nil
	}
	frags := []fragment{{token: -1, start: 0, end: len(text)}}
	for _, id := range t.special {
		a := t.attrs[id]
		if !parseSpecial && a&(attrControl|attrUnknown) != 0 {
			continue
		}
		tok := t.tokens[id]
		if !strings.Contains(text, tok) {
			continue
		}
		var next []fragment
		for _, f := range frags {
			if f.token >= 0 {
				next = append(next, f)
				continue
			}
			for f.start < f.end {
				i := strings.Index(text[f.start:f.end], tok)
				if i < 0 {
					next = append(next, f)
					break
				}
				if i > 0 {
					next = append(next, fragment{token: -1, start: f.start, end: f.start + i})
				}
				next = append(next, fragment{token: id})
				f.start += i + len(tok)
			}
		}
		frags = next
	}
	return frags
}

// encodeText appends the tokens of a span of raw text.
func (t *Tokenizer) encodeText(sc *scratch, text string, out []int) []int {
	text = sanitize(text)
	sc.words = split(t.pre, text, &sc.c, sc.words[:0])
	for _, w := range sc.words {
		word := text[w[0]:w[1]]
		out = t.encodeWord(sc, word, out)
	}
	return out
}

func (t *Tokenizer) encodeWord(sc *scratch, word string, out []int) []int {
	if t.ignoreMerges {
		if id, ok := t.bpe.sym[word]; ok && t.bpe.symToken[id] >= 0 {
			return append(out, int(t.bpe.symToken[id]))
		}
	}
	t.mu.Lock()
	ids, ok := t.cache[word]
	t.mu.Unlock()
	if !ok {
		sc.out = t.bpe.encodeWord(&sc.sess, word, sc.out[:0])
		ids = append([]int32(nil), sc.out...)
		t.mu.Lock()
		if len(t.cache) >= cacheLimit {
			clear(t.cache)
		}
		t.cache[strings.Clone(word)] = ids
		t.mu.Unlock()
	}
	for _, id := range ids {
		out = append(out, int(id))
	}
	return out
}
