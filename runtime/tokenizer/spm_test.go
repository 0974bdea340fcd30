package tokenizer

import (
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/lesfarm/lesfarm/runtime/gguf"
)

// spmVocab builds a small SentencePiece vocabulary: <unk>, <s>, </s>, the
// 256 byte tokens, then scored pieces.
func spmVocab(t testing.TB) (Config, map[string]int) {
	tokens := []string{"<unk>", "<s>", "</s>"}
	types := []int32{TypeUnknown, TypeControl, TypeControl}
	scores := []float32{0, 0, 0}
	for b := 0; b < 256; b++ {
		tokens = append(tokens, fmt.Sprintf("<0x%02X>", b))
		types = append(types, TypeByte)
		scores = append(scores, 0)
	}
	pieces := []struct {
		text  string
		score float32
	}{{"▁", -10}, {"h", -11}, {"e", -12}, {"l", -13}, {"o", -14}, {"▁h", -6}, {"he", -5}, {"ll", -4}, {"llo", -3}, {"hello", -2}, {"▁hello", -1}}
	ids := map[string]int{}
	for _, p := range pieces {
		ids[p.text] = len(tokens)
		tokens = append(tokens, p.text)
		types = append(types, TypeNormal)
		scores = append(scores, p.score)
	}
	return Config{Model: "llama", Tokens: tokens, Types: types, Scores: scores, BOS: 1, EOS: 2, AddBOS: true}, ids
}

func TestSentencePiece(t *testing.T) {
	cfg, ids := spmVocab(t)
	tok, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	byteID := func(b byte) int { return 3 + int(b) }
	tests := []struct {
		text    string
		special bool
		want    []int
	}{
		// ll, llo, he, hello, ▁hello by descending score.
		{"hello", false, []int{1, ids["▁hello"]}},
		// Characters outside the vocabulary fall back to byte tokens.
		{"hi!", false, []int{1, ids["▁h"], byteID('i'), byteID('!')}},
		{"hello hello", false, []int{1, ids["▁hello"], ids["▁hello"]}},
		// A space is prefixed again after a special token.
		{"hello</s>hello", true, []int{1, ids["▁hello"], 2, ids["▁hello"]}},
		{"é", false, []int{1, ids["▁"], byteID(0xc3), byteID(0xa9)}},
	}
	for _, tc := range tests {
		got := tok.Encode(tc.text, tc.special)
		if !reflect.DeepEqual(got, tc.want) {
			t.Errorf("Encode(%q) = %v, want %v", tc.text, got, tc.want)
		}
		if dec := tok.Decode(got[1:]); dec != tc.text {
			t.Errorf("Decode(Encode(%q)) = %q", tc.text, dec)
		}
	}
	if got := tok.Piece(ids["▁hello"]); got != " hello" {
		t.Errorf("Piece = %q", got)
	}

	// Through a GGUF: defaults as llama.cpp (add_bos on, BOS 1, EOS 2).
	path := filepath.Join(t.TempDir(), "spm.gguf")
	out, _ := os.Create(path)
	w := gguf.NewWriter(out)
	w.AddKV("tokenizer.ggml.model", "llama")
	w.AddKV("tokenizer.ggml.tokens", cfg.Tokens)
	w.AddKV("tokenizer.ggml.token_type", cfg.Types)
	w.AddKV("tokenizer.ggml.scores", cfg.Scores)
	w.AddKV("tokenizer.ggml.add_space_prefix", false)
	if err := w.WriteHeader(); err != nil {
		t.Fatal(err)
	}
	w.Close()
	out.Close()
	f, err := gguf.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	tok2, err := FromGGUF(f)
	if err != nil {
		t.Fatal(err)
	}
	if tok2.BOS() != 1 || tok2.EOS() != 2 {
		t.Errorf("defaults: bos %d eos %d", tok2.BOS(), tok2.EOS())
	}
	if got := tok2.Encode("hello", false); !reflect.DeepEqual(got, []int{1, ids["hello"]}) {
		t.Errorf("without space prefix: %v", got)
	}
}
