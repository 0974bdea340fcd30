// Package perplexity measures a model's perplexity on a token sequence the
// way llama.cpp's perplexity tool does, so figures compare with that tool's.
//
// Two methods:
//
//   - MethodLlamaCpp (llama.cpp's default): the tokens are cut into
//     consecutive windows of Context tokens (stride Context, only full
//     windows, at least two of them). Each window is evaluated from an empty
//     cache at positions 0..Context-1; if the tokenizer adds a BOS token, the
//     window's first token is replaced by BOS. Only the second half is
//     scored: the logits at positions Context/2 .. Context-2 predict the
//     window's tokens Context/2+1 .. Context-1, i.e. Context-1-Context/2
//     tokens per window.
//   - MethodWindows (the method of ../shared/testdata/trained/ref.json):
//     consecutive non-overlapping windows of Context tokens from index 0,
//     each from an empty cache at positions 0..Context-1; every position i
//     predicts the sequence's next token, so the token after the window is
//     the target of its last position; only windows whose last target
//     exists are used.
//
// In both, ppl = exp(mean negative log-likelihood over the scored tokens),
// with log-softmax computed in float64 over the full vocabulary.
package perplexity

import (
	"context"
	"errors"
	"fmt"
	"math"

	"github.com/lesfarm/lesfarm/runtime/model"
)

// Method selects how windows are cut and scored.
type Method string

// Methods.
const (
	MethodLlamaCpp Method = "llama.cpp"
	MethodWindows  Method = "windows"
)

// Methods lists the valid methods, the default first.
var Methods = []Method{MethodLlamaCpp, MethodWindows}

// ParseMethod returns the method named s.
func ParseMethod(s string) (Method, error) {
	for _, m := range Methods {
		if string(m) == s {
			return m, nil
		}
	}
	return "", fmt.Errorf("perplexity: unknown method %q (use llama.cpp or windows)", s)
}

// Config configures Run. The zero value is llama.cpp's method with the
// model's context length.
type Config struct {
	Method Method
	// Context is the window length in tokens (default: the model's
	// context length, which llama.cpp uses with -c 0).
	Context int
	// MaxWindows limits the windows evaluated (0 = all, llama.cpp's
	// --chunks).
	MaxWindows int
	// BOS is the token that replaces each window's first token under
	// MethodLlamaCpp; negative means the tokenizer adds none.
	BOS int
	// Batch is the forward-pass batch (default 512, llama.cpp's n_batch).
	Batch int
	// Progress, if set, is called after each window.
	Progress func(done, total int)
}

// Result is a perplexity measurement. JSON field names are the CLI's
// contract.
type Result struct {
	PPL          float64 `json:"ppl"`
	MeanNLL      float64 `json:"mean_nll"`
	Method       Method  `json:"method"`
	Context      int     `json:"context"`
	Stride       int     `json:"stride"`
	ScoreFirst   int     `json:"score_first"` // first scored window position (its logits predict the next token)
	ScoreLast    int     `json:"score_last"`  // last scored window position
	Windows      int     `json:"windows"`
	TokensScored int     `json:"tokens_scored"`
	Tokens       int     `json:"tokens"` // input tokens
	// NLLs holds the per-window mean NLL (for analysis; not in JSON).
	NLLs []float64 `json:"-"`
}

// ErrTooShort is wrapped when the text has too few tokens for one window
// (two for llama.cpp's method).
var ErrTooShort = errors.New("text too short")

// Plan returns the number of windows and the scored window positions
// [first, last] for n tokens under cfg (Context already set).
func Plan(n int, cfg Config) (windows, first, last int, err error) {
	c := cfg.Context
	if c < 2 {
		return 0, 0, 0, fmt.Errorf("perplexity: context %d must be at least 2", c)
	}
	switch cfg.Method {
	case MethodLlamaCpp:
		if n < 2*c {
			return 0, 0, 0, fmt.Errorf("perplexity: %w: llama.cpp's method needs at least %d tokens (2 × context %d), the text has %d; give a longer --file or a smaller --ctx", ErrTooShort, 2*c, c, n)
		}
		windows, first, last = n/c, c/2, c-2
	case MethodWindows:
		windows, first, last = (n-1)/c, 0, c-1
		if windows < 1 {
			return 0, 0, 0, fmt.Errorf("perplexity: %w: one window of %d tokens plus its target needs %d tokens, the text has %d; give a longer --file or a smaller --ctx", ErrTooShort, c, c+1, n)
		}
	default:
		return 0, 0, 0, fmt.Errorf("perplexity: unknown method %q", cfg.Method)
	}
	if cfg.MaxWindows > 0 {
		windows = min(windows, cfg.MaxWindows)
	}
	return windows, first, last, nil
}

// Run evaluates m on ids and returns its perplexity.
func Run(ctx context.Context, m *model.Model, ids []int, cfg Config) (*Result, error) {
	if cfg.Method == "" {
		cfg.Method = MethodLlamaCpp
	}
	if cfg.Context == 0 {
		cfg.Context = m.Context
	}
	if cfg.Context > m.Context {
		return nil, fmt.Errorf("perplexity: context %d exceeds the model's context length %d; give --ctx %d or less", cfg.Context, m.Context, m.Context)
	}
	if cfg.Batch <= 0 {
		cfg.Batch = 512
	}
	for _, t := range ids {
		if t < 0 || t >= m.Vocab {
			return nil, fmt.Errorf("perplexity: token id %d outside the vocabulary of %d", t, m.Vocab)
		}
	}
	windows, first, last, err := Plan(len(ids), cfg)
	if err != nil {
		return nil, err
	}
	c := cfg.Context
	st, err := m.NewState(c)
	if err != nil {
		return nil, fmt.Errorf("perplexity: %w", err)
	}
	res := &Result{Method: cfg.Method, Context: c, Stride: c, ScoreFirst: first, ScoreLast: last, Windows: windows, Tokens: len(ids)}
	win := make([]int, c)
	logits := make([]float32, 0, c*m.Vocab)
	var nll float64
	for w := range windows {
		start := w * c
		copy(win, ids[start:start+c])
		if cfg.Method == MethodLlamaCpp && cfg.BOS >= 0 && cfg.BOS < m.Vocab {
			win[0] = cfg.BOS
		}
		st.Reset()
		logits = logits[:0]
		for pos := 0; pos < c; pos += cfg.Batch {
			out, err := st.Forward(ctx, win[pos:min(pos+cfg.Batch, c)], true)
			if err != nil {
				return nil, fmt.Errorf("perplexity: window %d: %w", w, err)
			}
			logits = append(logits, out...)
		}
		var wn float64
		for i := first; i <= last; i++ {
			wn += NLL(logits[i*m.Vocab:(i+1)*m.Vocab], ids[start+i+1])
		}
		cnt := last - first + 1
		nll += wn
		res.TokensScored += cnt
		res.NLLs = append(res.NLLs, wn/float64(cnt))
		if cfg.Progress != nil {
			cfg.Progress(w+1, windows)
		}
	}
	res.MeanNLL = nll / float64(res.TokensScored)
	res.PPL = math.Exp(res.MeanNLL)
	return res, nil
}

// NLL returns -log softmax(logits)[target], computed in float64.
func NLL(logits []float32, target int) float64 {
	mx := math.Inf(-1)
	for _, v := range logits {
		mx = max(mx, float64(v))
	}
	var sum float64
	for _, v := range logits {
		sum += math.Exp(float64(v) - mx)
	}
	return math.Log(sum) - (float64(logits[target]) - mx)
}
