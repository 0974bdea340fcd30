package tokenizer

import (
	"path/filepath"
	"testing"

	"github.com/lesfarm/lesfarm/runtime/gguf"
)

// loadVocab builds a tokenizer from a vocab-only GGUF in testdata.
func loadVocab(t testing.TB, name string) *Tokenizer {
	t.Helper()
	f, err := gguf.Open(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	tok, err := FromGGUF(f)
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// firstDiff returns the first index where a and b differ, or -1.
func firstDiff(a, b []int) int {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	if len(a) != len(b) {
		return min(len(a), len(b))
	}
	return -1
}

// TestConformance checks every reference tokenization copied from the
// llama.cpp references (testdata/refs.json) token for token, and that
// decoding gives the text back.
func TestConformance(t *testing.T) {
	var refs refFile
	readJSON(t, filepath.Join("testdata", "refs.json"), &refs)
	toks := map[string]*Tokenizer{}
	total := 0
	for _, c := range refs.Cases {
		tok := toks[c.Vocab]
		if tok == nil {
			tok = loadVocab(t, c.Vocab)
			toks[c.Vocab] = tok
		}
		got := tok.Encode(c.Text, false)
		if i := firstDiff(got, c.IDs); i >= 0 {
			lo, hi := max(0, i-3), min(i+4, len(got), len(c.IDs))
			t.Errorf("%s %q...: first difference at token %d of %d: got %v, want %v", c.Source, trunc(c.Text), i, len(c.IDs), got[lo:min(hi, len(got))], c.IDs[lo:min(hi, len(c.IDs))])
			continue
		}
		if dec := tok.Decode(got); dec != c.Text {
			t.Errorf("%s %q: Decode(Encode) = %q", c.Source, trunc(c.Text), trunc(dec))
		}
		total += len(c.IDs)
	}
	t.Logf("%d reference texts, %d tokens matched", len(refs.Cases), total)
	if len(refs.Cases) < 7 {
		t.Fatalf("only %d reference cases in testdata/refs.json", len(refs.Cases))
	}
}

func trunc(s string) string {
	if len(s) > 40 {
		return s[:40]
	}
	return s
}
