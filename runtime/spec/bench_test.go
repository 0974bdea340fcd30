package spec

import (
	"context"
	"testing"

	"github.com/lesfarm/lesfarm/profile"
	"github.com/lesfarm/lesfarm/runtime/expert"
	"github.com/lesfarm/lesfarm/runtime/generate"
	"github.com/lesfarm/lesfarm/runtime/gguf"
	"github.com/lesfarm/lesfarm/runtime/moe"
)

// BenchmarkDecode compares plain greedy decoding with speculative decoding
// (the trained draft, K = 2 and 4) on the trained MoE, side by side in one
// run: experts resident, and streamed (scheduled, 25% budget) from an
// emulated phone-mid storage. Each iteration generates 64 tokens from each
// validation.txt line (its first 32 tokens as the prompt); decode-tok/s is
// decode tokens over decode wall time (draft included), the figure to
// compare; target-µs/pass is the cost of one target pass (one token for
// plain decoding, K+1 positions for a verify pass).
func BenchmarkDecode(b *testing.B) {
	draft := loadTrained(b, trainedDraft, nil)
	path := sharedTestdata(b, trainedMoE)
	prof, err := profile.Load("phone-mid")
	if err != nil {
		b.Fatal(err)
	}
	targets := []struct {
		name string
		src  func(*gguf.File, []moe.LayerShape) (moe.Source, error)
	}{
		{"resident", nil},
		{"scheduled-25%-phone-mid", func(f *gguf.File, shapes []moe.LayerShape) (moe.Source, error) {
			var total int64
			for _, s := range shapes {
				total += int64(s.Experts) * s.Bytes()
			}
			return expert.Open(path, f, shapes, "", expert.Options{Mode: expert.Scheduled, Budget: total / 4, Profile: prof})
		}},
	}
	for _, tg := range targets {
		target := loadTrained(b, trainedMoE, tg.src)
		prompts := validationPrompts(b, target, 32)
		const gen = 64
		for _, k := range []int{0, 2, 4} {
			name := tg.name + "/plain"
			if k > 0 {
				name = tg.name + "/spec-k" + string(rune('0'+k))
			}
			dec, err := New(target, draft)
			if err != nil {
				b.Fatal(err)
			}
			st, err := target.NewState(32 + gen)
			if err != nil {
				b.Fatal(err)
			}
			b.Run(name, func(b *testing.B) {
				b.ReportAllocs()
				var tokens int
				var decode float64
				var spec Stats
				for b.Loop() {
					for _, prompt := range prompts {
						var res *generate.Result
						if k == 0 {
							r, err := generate.Run(context.Background(), target, generate.Params{PromptIDs: prompt, MaxTokens: gen, State: st})
							if err != nil {
								b.Fatal(err)
							}
							res = r
						} else {
							r, err := dec.Run(context.Background(), Params{PromptIDs: prompt, MaxTokens: gen, K: k})
							if err != nil {
								b.Fatal(err)
							}
							res = &r.Result
							spec.Rounds += r.Spec.Rounds
							spec.Drafted += r.Spec.Drafted
							spec.Accepted += r.Spec.Accepted
							spec.Generated += r.Spec.Generated
							spec.DraftTime += r.Spec.DraftTime
							spec.TargetTime += r.Spec.TargetTime
						}
						tokens += res.DecodeSteps
						decode += res.Decode.Seconds()
					}
				}
				b.ReportMetric(float64(tokens)/decode, "decode-tok/s")
				if k > 0 {
					b.ReportMetric(spec.AcceptanceRate(), "acceptance")
					b.ReportMetric(spec.TokensPerTargetPass(), "tok/pass")
					b.ReportMetric(float64(spec.TargetTime.Microseconds())/float64(spec.Rounds), "target-µs/pass")
					b.ReportMetric(spec.DraftTime.Seconds()/decode, "draft-share")
				} else {
					b.ReportMetric(decode*1e6/float64(tokens), "target-µs/pass")
				}
			})
		}
	}
}
