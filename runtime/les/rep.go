package les

import (
	"context"
	"fmt"
	"time"

	"github.com/lesfarm/lesfarm/runtime/expert"
	"github.com/lesfarm/lesfarm/runtime/generate"
	"github.com/lesfarm/lesfarm/runtime/model"
	"github.com/lesfarm/lesfarm/runtime/spec"
)

// Decoder generates one prompt's continuation: plain decoding (the
// default) or speculative decoding (Speculative). Both fill a
// generate.Result and call p.OnToken with every generated token in order.
type Decoder interface {
	Generate(ctx context.Context, p generate.Params) (*generate.Result, error)
}

// plainDecoder is generate.Run with one reused sequence state.
type plainDecoder struct {
	m  *model.Model
	st *model.State
}

func (d *plainDecoder) Generate(ctx context.Context, p generate.Params) (*generate.Result, error) {
	if err := d.reserve(len(p.PromptIDs) + p.MaxTokens); err != nil {
		return nil, err
	}
	p.State = d.st
	return generate.Run(ctx, d.m, p)
}

// reserve makes the state hold n positions (at most the context), so a
// repetition's prompts share one state however their lengths are ordered.
func (d *plainDecoder) reserve(n int) error {
	n = min(n, d.m.Context)
	if d.st != nil && d.st.Cap() >= n {
		return nil
	}
	st, err := d.m.NewState(n)
	if err != nil {
		return err
	}
	d.st = st
	return nil
}

// Speculative decodes with a speculative decoder (a drafter proposes, the
// target verifies in one batched pass; greedy output is plain decoding's)
// and sums its counters in Stats.
type Speculative struct {
	Dec      *spec.Decoder
	K        int  // draft tokens per round; with Adaptive the most tried
	Adaptive bool // choose k each round (spec.Params.Adaptive)
	// CutVerify ends verify passes before drafted positions that would
	// read experts (spec.Params.CutVerify).
	CutVerify bool
	CutSlack  int // spec.Params.CutSlack
	// Stats sums the counters of every generation (spec.Stats.Add); Last
	// is the last generation's, histogram included.
	Stats, Last spec.Stats
}

// Generate implements Decoder.
func (s *Speculative) Generate(ctx context.Context, p generate.Params) (*generate.Result, error) {
	res, err := s.Dec.Run(ctx, spec.Params{PromptIDs: p.PromptIDs, MaxTokens: p.MaxTokens, K: s.K, Adaptive: s.Adaptive, CutVerify: s.CutVerify, CutSlack: s.CutSlack,
		Sampling: p.Sampling, IsEOG: p.IsEOG, Sink: p.Sink, Batch: p.Batch, OnToken: p.OnToken})
	if res == nil {
		return nil, err
	}
	if err == nil {
		s.Stats.Add(&res.Spec)
		s.Stats.Drafter = res.Spec.Drafter
		s.Last = res.Spec
	}
	return &res.Result, err
}

// RepParams are what one repetition generates: every prompt in turn, each
// continued by up to MaxTokens tokens.
type RepParams struct {
	Prompts   [][]int
	MaxTokens int
	// Sampling, IsEOG, Sink and OnToken are passed to generate.Params
	// (zero: greedy, no early stop, no events, no callback).
	generate.Params
}

// Rep is one repetition's raw measurement, summed over its prompts: the
// counters every metric of Result is computed from (result.go).
type Rep struct {
	Prompts      int // prompts run
	PromptTokens int // prompt tokens prefilled
	// Prefill is the prompts' prefill time and TTFT their time to first
	// token, summed over prompts: the device's when DeviceTime (the
	// device clock's time for the prefill passes, Stats.DevicePrefill
	// plus any one-position pass before the first token; the device
	// samples as it ends), else the host's wall times, HostPrefill and
	// HostTTFT.
	Prefill, TTFT         time.Duration
	HostPrefill, HostTTFT time.Duration
	DecodeTokens          int // decode forward passes (generated tokens − 1 per prompt)
	// Decode is the decode phase's time: the device's (the store's device
	// clock, DeviceCompute + DeviceStall) when DeviceTime, else the wall
	// time of the decode forward passes, HostDecode.
	Decode, HostDecode time.Duration
	DeviceTime         bool
	// Expert and PrefillExpert are the store's counters over the decode
	// and the prefill phase (zero without a store). The decode phase of a
	// prompt starts when its first token is sampled.
	Expert, PrefillExpert expert.Stats
	// Tokens are the generated tokens per prompt.
	Tokens [][]int
	// Last is the last prompt's generation.
	Last *generate.Result
}

// Repetition runs p.Prompts once through the session's decoder. It returns
// ctx's error when cancelled, and the first generation error otherwise,
// with the repetition so far.
func (s *Session) Repetition(ctx context.Context, p RepParams) (Rep, error) {
	r := Rep{DeviceTime: s.DeviceTime()}
	if len(p.Prompts) == 0 {
		return r, fmt.Errorf("les: no prompts")
	}
	if pd, ok := s.dec.(*plainDecoder); ok {
		longest := 0
		for _, prompt := range p.Prompts {
			longest = max(longest, len(prompt))
		}
		if err := pd.reserve(longest + p.MaxTokens); err != nil {
			return r, err
		}
	}
	for _, prompt := range p.Prompts {
		gp := p.Params
		gp.PromptIDs, gp.MaxTokens = prompt, p.MaxTokens
		start := s.stats()
		atDecode, first := start, true
		user := p.OnToken
		gp.OnToken = func(id int) error {
			if first {
				first = false
				atDecode = s.stats()
			}
			if user != nil {
				return user(id)
			}
			return nil
		}
		res, err := s.dec.Generate(ctx, gp)
		if res == nil {
			return r, err
		}
		end := s.stats()
		if first { // no token was sampled: all of it was prefill
			atDecode = end
		}
		r.add(RepOf(res))
		if s.Store != nil {
			dec := end.Sub(atDecode)
			r.Expert.Add(dec)
			pre := atDecode.Sub(start)
			r.PrefillExpert.Add(pre)
			if r.DeviceTime {
				r.Decode += dec.DeviceTime()
				p := pre.DevicePrefill + pre.DeviceTime()
				r.Prefill += p
				r.TTFT += p
			}
		}
		if err != nil {
			return r, err
		}
	}
	return r, nil
}

// RepOf is the host-time Rep of one generation, without store counters (a
// prompt's share of a repetition).
func RepOf(res *generate.Result) Rep {
	return Rep{Prompts: 1, PromptTokens: len(res.PromptIDs), Prefill: res.Prefill, TTFT: res.TTFT,
		HostPrefill: res.Prefill, HostTTFT: res.TTFT, DecodeTokens: res.DecodeSteps,
		Decode: res.Decode, HostDecode: res.Decode, Tokens: [][]int{res.TokenIDs}, Last: res}
}

// add adds o's counts and times to r (o is one prompt's share).
func (r *Rep) add(o Rep) {
	r.Prompts += o.Prompts
	r.PromptTokens += o.PromptTokens
	r.HostPrefill += o.HostPrefill
	r.HostTTFT += o.HostTTFT
	r.DecodeTokens += o.DecodeTokens
	r.HostDecode += o.HostDecode
	r.Tokens = append(r.Tokens, o.Tokens...)
	r.Last = o.Last
	r.Expert.Add(o.Expert)
	r.PrefillExpert.Add(o.PrefillExpert)
	if !r.DeviceTime {
		r.Prefill += o.Prefill
		r.TTFT += o.TTFT
		r.Decode += o.Decode
	}
}

func (s *Session) stats() expert.Stats {
	if s.Store == nil {
		return expert.Stats{}
	}
	return s.Store.Meter().Stats()
}
