package generate

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"

	"github.com/lesfarm/lesfarm/runtime/model"
	"github.com/lesfarm/lesfarm/runtime/tensor"
	"github.com/lesfarm/lesfarm/runtime/trace"
)

const fixture = "../model/testdata/tiny-qwen3moe-q4_k_m.gguf"

// Golden q4_k_m reference: "The quick brown fox" and its greedy tokens.
var (
	prompt = []int{464, 2068, 1379, 675, 277, 1140}
	greedy = []int{3292, 2685, 2499, 3370, 258, 1002, 944, 3791}
)

func load(t *testing.T) *model.Model {
	t.Helper()
	m, err := model.Load(fixture, model.Options{Threads: 1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	return m
}

func synthSmall(t *testing.T) *model.Model {
	t.Helper()
	p := filepath.Join(t.TempDir(), "small.gguf")
	f, err := os.Create(p)
	if err != nil {
		t.Fatal(err)
	}
	c := model.SynthConfig{Layers: 1, Experts: 4, ExpertsUsed: 2, Hidden: 64, ExpertFFN: 64, Heads: 2, Vocab: 300, Context: 16, Type: tensor.F32}
	if err := model.WriteSynthetic(f, c); err != nil {
		t.Fatal(err)
	}
	f.Close()
	m, err := model.Load(p, model.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	return m
}

type recSink struct {
	mu     sync.Mutex
	tokens []trace.TokenEvent
	layers int
}

func (r *recSink) Token(ev *trace.TokenEvent) {
	r.mu.Lock()
	r.tokens = append(r.tokens, *ev)
	r.mu.Unlock()
}
func (r *recSink) Layer(*trace.LayerEvent) { r.mu.Lock(); r.layers++; r.mu.Unlock() }
func (r *recSink) Read(*trace.ReadEvent)   {}

func TestGreedyTimingsAndTrace(t *testing.T) {
	m := load(t)
	sink := &recSink{}
	var streamed []int
	res, err := Run(context.Background(), m, Params{
		PromptIDs: prompt, MaxTokens: len(greedy), Sink: sink, Batch: 4,
		OnToken: func(id int) error { streamed = append(streamed, id); return nil },
	})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(res.TokenIDs, greedy) || !slices.Equal(streamed, greedy) {
		t.Fatalf("tokens %v (streamed %v), want %v", res.TokenIDs, streamed, greedy)
	}
	if res.StopReason != StopMaxTokens || res.DecodeSteps != len(greedy)-1 {
		t.Fatalf("stop %q after %d decode steps", res.StopReason, res.DecodeSteps)
	}
	if res.Prefill <= 0 || res.Decode <= 0 || res.DecodeSteps == 0 || res.TTFT < res.Prefill {
		t.Fatalf("timings: prefill %v, decode %v, ttft %v", res.Prefill, res.Decode, res.TTFT)
	}
	// Batch 4 splits the 6-token prompt into 2 prefill steps, then 7 decodes.
	if len(sink.tokens) != 2+7 || sink.layers != 4*(2+7) {
		t.Fatalf("%d token events, %d layer events", len(sink.tokens), sink.layers)
	}
	if ev := sink.tokens[1]; ev.Phase != trace.Prefill || ev.Pos != 4 || ev.Tokens != 2 || ev.Step != 1 {
		t.Fatalf("second prefill event %+v", ev)
	}
	if ev := sink.tokens[8]; ev.Phase != trace.Decode || ev.Pos != 12 || ev.Tokens != 1 || ev.Step != 8 {
		t.Fatalf("last decode event %+v", ev)
	}
}

func TestStopConditionsAndErrors(t *testing.T) {
	m := load(t)
	ctx := context.Background()
	// EOG: declare the third greedy token an end-of-generation token.
	res, err := Run(ctx, m, Params{PromptIDs: prompt, MaxTokens: 20, IsEOG: func(id int) bool { return id == greedy[2] }})
	if err != nil || res.StopReason != StopEOG || !slices.Equal(res.TokenIDs, greedy[:3]) {
		t.Fatalf("EOG stop: %v %+v", err, res)
	}
	long := make([]int, m.Context+1)
	if _, err := Run(ctx, m, Params{PromptIDs: long, MaxTokens: 1}); !errors.Is(err, ErrPromptTooLong) {
		t.Fatalf("prompt over context: %v", err)
	}
	if _, err := Run(ctx, m, Params{MaxTokens: 1}); err == nil {
		t.Fatal("empty prompt accepted")
	}
	if _, err := Run(ctx, m, Params{PromptIDs: prompt}); err == nil {
		t.Fatal("max tokens 0 accepted")
	}
	// Context full: on a synthetic model with a 16-token context, a prompt
	// of 14 leaves room for 2 decode steps, so 3 tokens come out.
	small := synthSmall(t)
	fill := make([]int, small.Context-2)
	res, err = Run(ctx, small, Params{PromptIDs: fill, MaxTokens: 10, Batch: 512})
	if err != nil || res.StopReason != StopContext || len(res.TokenIDs) != 3 {
		t.Fatalf("context stop: %v, %d tokens, %q", err, len(res.TokenIDs), res.StopReason)
	}
	cctx, cancel := context.WithCancel(ctx)
	n := 0
	res, err = Run(cctx, m, Params{PromptIDs: prompt, MaxTokens: 50, OnToken: func(int) error {
		if n++; n == 3 {
			cancel()
		}
		return nil
	}})
	if !errors.Is(err, context.Canceled) || len(res.TokenIDs) != 3 {
		t.Fatalf("cancel: %v after %d tokens", err, len(res.TokenIDs))
	}
}
