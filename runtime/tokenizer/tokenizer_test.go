package tokenizer

import (
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/lesfarm/lesfarm/runtime/gguf"
)

// TestSharedReferences checks the tokenization of every prompt of every
// shared reference file (all golden variants, both trained models and the
// whole validation.txt) against the model file's own vocabulary.
func TestSharedReferences(t *testing.T) {
	shared := sharedTestdata(t)
	type check struct {
		model, ref string
		texts      []string
		ids        [][]int
	}
	var checks []check
	goldens, _ := filepath.Glob(filepath.Join(shared, "golden", "*.ref.json"))
	for _, ref := range goldens {
		var r struct {
			ModelFile string `json:"model_file"`
			Prompts   []struct {
				Text string `json:"text"`
				IDs  []int  `json:"token_ids"`
			} `json:"prompts"`
		}
		readJSON(t, ref, &r)
		c := check{model: filepath.Join(shared, "golden", strings.TrimSuffix(filepath.Base(ref), ".ref.json")+".gguf"), ref: ref}
		for _, p := range r.Prompts {
			c.texts, c.ids = append(c.texts, p.Text), append(c.ids, p.IDs)
		}
		checks = append(checks, c)
	}
	var tr struct {
		Validation []int `json:"validation_txt_token_ids"`
		MoE, Draft struct {
			File    string `json:"file"`
			Prompts []struct {
				Prompt string `json:"prompt"`
				IDs    []int  `json:"prompt_ids"`
			} `json:"prompts"`
		}
	}
	trainedRef := filepath.Join(shared, "trained", "ref.json")
	if _, err := os.Stat(trainedRef); err == nil {
		readJSON(t, trainedRef, &tr)
		val, err := os.ReadFile(filepath.Join(shared, "trained", "validation.txt"))
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range []struct {
			file    string
			prompts []struct {
				Prompt string `json:"prompt"`
				IDs    []int  `json:"prompt_ids"`
			}
		}{{tr.MoE.File, tr.MoE.Prompts}, {tr.Draft.File, tr.Draft.Prompts}} {
			c := check{model: filepath.Join(shared, "trained", filepath.Base(m.file)), ref: trainedRef}
			for _, p := range m.prompts {
				c.texts, c.ids = append(c.texts, p.Prompt), append(c.ids, p.IDs)
			}
			c.texts, c.ids = append(c.texts, string(val)), append(c.ids, tr.Validation)
			checks = append(checks, c)
		}
	} else {
		t.Logf("SKIPPING trained references: %v", err)
	}
	texts, tokens := 0, 0
	for _, c := range checks {
		f, err := gguf.Open(c.model)
		if err != nil {
			t.Fatal(err)
		}
		tok, err := FromGGUF(f)
		f.Close()
		if err != nil {
			t.Fatal(err)
		}
		for i, text := range c.texts {
			got := tok.Encode(text, false)
			if d := firstDiff(got, c.ids[i]); d >= 0 {
				t.Errorf("%s, %s prompt %d: first difference at token %d", filepath.Base(c.model), filepath.Base(c.ref), i, d)
				continue
			}
			texts++
			tokens += len(got)
		}
	}
	t.Logf("%d model files, %d texts, %d tokens equal to the llama.cpp references", len(checks), texts, tokens)
}

func TestSpecialTokens(t *testing.T) {
	tok := loadVocab(t, "qwen2-vocab.gguf")
	if tok.VocabSize() != 4096 || tok.BOS() != 4093 || tok.EOS() != 4095 {
		t.Fatalf("vocab %d bos %d eos %d", tok.VocabSize(), tok.BOS(), tok.EOS())
	}
	for id, want := range map[int]bool{4093: true, 4094: false, 4095: true, 0: false, 262: false} {
		if tok.IsEOG(id) != want {
			t.Errorf("IsEOG(%d) = %v", id, !want)
		}
	}
	text := "<|im_start|>user\nhi there<|im_end|>\n"
	special := tok.Encode(text, true)
	if special[0] != 4094 || !reflect.DeepEqual(special[len(special)-2:], []int{4095, 198}) {
		t.Errorf("parseSpecial: %v", special)
	}
	plain := tok.Encode(text, false)
	for _, id := range plain {
		if id >= 4093 {
			t.Errorf("control token %d produced without parseSpecial: %v", id, plain)
		}
	}
	for _, ids := range [][]int{special, plain} {
		if got := tok.Decode(ids); got != text {
			t.Errorf("Decode = %q, want %q", got, text)
		}
	}
	if got := tok.Encode("<|im_end|><|im_end|>", true); !reflect.DeepEqual(got, []int{4095, 4095}) {
		t.Errorf("adjacent specials: %v", got)
	}
	if got := tok.Piece(4094); got != "<|im_start|>" {
		t.Errorf("Piece(4094) = %q", got)
	}
	if got := tok.Piece(220); got != " " {
		t.Errorf("Piece(220) = %q, want a space", got)
	}
	if got := string(tok.AppendPiece(tok.AppendPiece(nil, 4094), 220)); got != "<|im_start|> " {
		t.Errorf("AppendPiece = %q", got)
	}
	if tok.Model() != "gpt2" || tok.AddBOS() {
		t.Errorf("Model %q AddBOS %v", tok.Model(), tok.AddBOS())
	}
	if tok.Piece(-1) != "" || tok.Piece(4096) != "" {
		t.Error("Piece outside the vocabulary should be empty")
	}
	if tok.Encode("", true) != nil {
		t.Error("empty text should give no tokens")
	}
}

// TestAddSpecialAndUserDefined covers add_bos/add_eos and user-defined
// tokens, which llama.cpp splits out even without parseSpecial.
func TestAddSpecialAndUserDefined(t *testing.T) {
	tokens := []string{"<s>", "</s>", "<tool>"}
	types := []int32{TypeControl, TypeControl, TypeUserDefined}
	for b := 0; b < 256; b++ {
		tokens = append(tokens, string(byteToRune[b]))
		types = append(types, TypeNormal)
	}
	tokens = append(tokens, "ab", "Ġa")
	types = append(types, TypeNormal, TypeNormal)
	tok, err := New(Config{Model: "gpt2", Pre: "gpt-2", Tokens: tokens, Types: types, Merges: []string{"a b", "Ġ a"}, BOS: 0, EOS: 1, AddBOS: true, AddEOS: true})
	if err != nil {
		t.Fatal(err)
	}
	ab, spA := len(tokens)-2, len(tokens)-1
	if got := tok.Encode(" a", false); !reflect.DeepEqual(got, []int{0, spA, 1}) {
		t.Errorf("\" a\" = %v, want the merged Ġa", got)
	}
	got := tok.Encode("ab<tool> ab", false)
	// " ab": "a b" (rank 0) wins over "Ġ a" (rank 1), leaving the space alone.
	want := []int{0, ab, 2, 3 + ' ', ab, 1}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("Encode = %v, want %v", got, want)
	}
	if got := tok.Tokenize("ab", false, false); !reflect.DeepEqual(got, []int{ab}) {
		t.Errorf("Tokenize without special = %v", got)
	}
	if !tok.IsEOG(1) || tok.IsEOG(0) || !tok.IsControl(0) || tok.IsControl(2) {
		t.Error("special token flags wrong")
	}
}

func TestRoundTrip(t *testing.T) {
	texts := []string{
		"", " ", "  leading and trailing  ", "tabs\tand\nnewlines\r\n\n", "ünïcödé — “quotes” …",
		"中文字符和한국어", "emoji 😀👍🏽 and ZWJ 👨‍👩‍👧", "numbers 1234567890 ½ ²", "it's we've I'LL",
		"\x00control\x07chars\x7f", "mixed\u00a0spaces\u3000here\u2028", "<|im_start|> not special here",
	}
	for _, name := range []string{"qwen2-vocab.gguf", "gpt2-vocab.gguf"} {
		tok := loadVocab(t, name)
		for _, s := range texts {
			ids := tok.Encode(s, false)
			if got := tok.Decode(ids); got != s {
				t.Errorf("%s: Decode(Encode(%q)) = %q", name, s, got)
			}
			for _, id := range ids {
				if id < 0 || id >= tok.VocabSize() {
					t.Errorf("%s: id %d out of range", name, id)
				}
			}
		}
		// Invalid UTF-8 comes back with U+FFFD, as in llama.cpp.
		if got := tok.Decode(tok.Encode("a\xffb", false)); got != "a\uFFFDb" {
			t.Errorf("%s: invalid UTF-8 round trip = %q", name, got)
		}
	}
}

func TestNewErrors(t *testing.T) {
	tests := []struct {
		cfg  Config
		want string
	}{
		{Config{Model: "gpt2"}, "empty vocabulary"},
		{Config{Model: "bert", Tokens: []string{"a"}, BOS: -1, EOS: -1}, `unsupported tokenizer model "bert"`},
		{Config{Model: "gpt2", Pre: "deepseek-llm", Tokens: []string{"a"}, BOS: -1, EOS: -1}, `unsupported pre-tokenizer "deepseek-llm"`},
		{Config{Model: "gpt2", Tokens: []string{"a"}, Types: []int32{}, BOS: -1, EOS: -1}, "0 token types for 1 tokens"},
		{Config{Model: "gpt2", Tokens: []string{"a"}, BOS: 5, EOS: -1}, "outside the vocabulary"},
		{Config{Model: "gpt2", Tokens: []string{"a"}, BOS: -1, EOS: -1, AddBOS: true}, "no BOS token"},
	}
	for _, tc := range tests {
		_, err := New(tc.cfg)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("New(%+v): %v, want %q", tc.cfg, err, tc.want)
		}
	}
}

func TestFromGGUFErrors(t *testing.T) {
	dir := t.TempDir()
	write := func(kvs map[string]any) *gguf.File {
		path := filepath.Join(dir, fmt.Sprint(len(kvs), "x.gguf"))
		out, _ := os.Create(path)
		w := gguf.NewWriter(out)
		for k, v := range kvs {
			w.AddKV(k, v)
		}
		if err := w.WriteHeader(); err != nil {
			t.Fatal(err)
		}
		w.Close()
		out.Close()
		f, err := gguf.Open(path)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { f.Close() })
		return f
	}
	if _, err := FromGGUF(write(map[string]any{})); err == nil || !strings.Contains(err.Error(), `"tokenizer.ggml.model" is missing`) {
		t.Errorf("no model: %v", err)
	}
	if _, err := FromGGUF(write(map[string]any{"tokenizer.ggml.model": "gpt2", "tokenizer.ggml.tokens": []int32{1}})); err == nil || !strings.Contains(err.Error(), `"tokenizer.ggml.tokens": is array of int32, not an array of string`) {
		t.Errorf("bad tokens: %v", err)
	}
	if _, err := FromGGUF(write(map[string]any{"tokenizer.ggml.model": "gpt2", "tokenizer.ggml.tokens": []string{"a"}})); err == nil || !strings.Contains(err.Error(), "tokenizer.ggml.merges") {
		t.Errorf("no merges: %v", err)
	}
}

// FuzzEncode checks that encoding never panics, yields ids inside the
// vocabulary, and decodes back to the (sanitized) input.
func FuzzEncode(f *testing.F) {
	toks := []*Tokenizer{loadVocab(f, "qwen2-vocab.gguf"), loadVocab(f, "gpt2-vocab.gguf")}
	spmCfg, _ := spmVocab(f)
	spmTok, err := New(spmCfg)
	if err != nil {
		f.Fatal(err)
	}
	for _, s := range []string{"The quick brown fox", "At 7:45 on 12 March 2024 — or why", "it's  \n\n x", "<|im_start|>hi<|im_end|>", "\xff\xc0\x80\xed\xa0\x80", "😀 ½ Ж"} {
		f.Add(s, false)
		f.Add(s, true)
	}
	f.Fuzz(func(t *testing.T, s string, special bool) {
		for _, tok := range toks {
			ids := tok.Encode(s, special)
			for _, id := range ids {
				if id < 0 || id >= tok.VocabSize() {
					t.Fatalf("id %d out of range", id)
				}
			}
			got := tok.Decode(ids)
			want := sanitize(s)
			if special {
				// Special tokens are split before sanitizing, so compare
				// fragment by fragment via the same partition.
				want = ""
				for _, fr := range tok.partition(s, true) {
					if fr.token >= 0 {
						want += tok.Piece(fr.token)
					} else {
						want += sanitize(s[fr.start:fr.end])
					}
				}
			}
			if got != want {
				t.Fatalf("Decode(Encode(%q, %v)) = %q, want %q", s, special, got, want)
			}
			if utf8.ValidString(s) && got != s {
				t.Fatalf("valid UTF-8 did not round-trip: %q -> %q", s, got)
			}
		}
		// SentencePiece falls back to byte tokens, so valid UTF-8 round-trips.
		// (A broken lead byte swallows the following bytes into one symbol,
		// escaped spaces included, exactly as in llama.cpp.)
		ids := spmTok.Encode(s, special)
		if len(ids) == 0 || ids[0] != spmTok.BOS() {
			t.Fatalf("SentencePiece: no BOS in %v", ids)
		}
		for _, id := range ids {
			if id < 0 || id >= spmTok.VocabSize() {
				t.Fatalf("SentencePiece: id %d out of range", id)
			}
		}
		if got := spmTok.Decode(ids[1:]); utf8.ValidString(s) && got != s {
			t.Fatalf("SentencePiece: Decode(Encode(%q, %v)) = %q", s, special, got)
		}
	})
}
