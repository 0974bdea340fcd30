package bench

import (
	"context"
	"fmt"
	"time"

	"github.com/lesfarm/lesfarm/runtime/expert"
	"github.com/lesfarm/lesfarm/runtime/model"
	"github.com/lesfarm/lesfarm/runtime/spec"
)

// SpeculativeRow is the mode name of the ladder's last rung: speculative
// decoding (adaptive k) on top of the last expert mode measured
// (scheduled by default), with the same store configuration.
const SpeculativeRow = "speculative"

// LadderSpec is the speculative row's own telemetry: acceptance, accepted
// length, verify cost and the experts each verify pass routed to.
type LadderSpec struct {
	Drafter             string  `json:"drafter"`
	AcceptanceRate      float64 `json:"acceptance_rate"`
	MeanAccepted        float64 `json:"mean_accepted"`
	TokensPerTargetPass float64 `json:"tokens_per_target_pass"`
	VerifyUS            float64 `json:"verify_us"`
	ExpertsPerVerify    float64 `json:"experts_per_verify"`
	OffShare            float64 `json:"off_share"`
}

// specLadder is the speculative rung while the ladder runs.
type specLadder struct {
	m     *model.Model
	store *expert.Store
	dec   *spec.Decoder
	draft *model.Model
	r     *ladderRun
	stats spec.Stats
}

func (s *specLadder) close() {
	s.m.Close()
	if s.draft != nil {
		s.draft.Close()
	}
}

// loadSpecLadder loads the speculative rung on mode: the n-gram drafter
// (cfg.Draft "" or "ngram"), the target's MTP block ("mtp") or a draft
// model file (resident).
func loadSpecLadder(cfg LadderConfig, mode expert.Mode, budget int64) (*specLadder, error) {
	m, store, err := loadMode(cfg, mode, budget, false, nil)
	if err != nil {
		return nil, err
	}
	s := &specLadder{m: m, store: store, r: &ladderRun{identical: true}}
	switch cfg.Draft {
	case "", DraftNGram:
		s.dec, err = spec.NewWithDrafter(m, &spec.NGramDrafter{})
	case "mtp":
		s.dec, err = spec.NewMTP(m)
	default:
		if s.draft, err = model.Load(cfg.Draft, model.Options{Threads: cfg.Threads}); err != nil {
			break
		}
		s.dec, err = spec.New(m, s.draft)
	}
	if err != nil {
		s.close()
		return nil, err
	}
	return s, nil
}

// run decodes like greedyRun with speculative decoding, adaptive k.
func (s *specLadder) run(ctx context.Context, prompt []int, n int, decodeStart func()) ([]int, time.Duration, error) {
	var t0 time.Time
	first := true
	res, err := s.dec.Run(ctx, spec.Params{PromptIDs: prompt, MaxTokens: n, K: spec.AdaptiveMaxK, Adaptive: true, OnToken: func(int) error {
		if first {
			first = false
			if decodeStart != nil {
				decodeStart()
			}
			t0 = time.Now()
		}
		return nil
	}})
	if err != nil {
		return nil, 0, fmt.Errorf("speculative: %w", err)
	}
	s.stats.Add(&res.Spec)
	s.stats.Drafter = res.Spec.Drafter
	return res.TokenIDs, time.Since(t0), nil
}

// row is the speculative rung's ladder row; prev is the row before it.
func (s *specLadder) row(rep *LadderReport, prev *LadderRow) LadderRow {
	r := s.r
	row := r.row(SpeculativeRow)
	rep.relate(&row, prev, func(m expert.Mode) float64 {
		for _, o := range rep.Rows {
			if o.Mode == m.String() {
				return o.DecodeTokensPerSecond
			}
		}
		return 0
	})
	st := &s.stats
	ls := &LadderSpec{Drafter: st.Drafter, AcceptanceRate: st.AcceptanceRate(), MeanAccepted: st.MeanAccepted(),
		TokensPerTargetPass: st.TokensPerTargetPass(), VerifyUS: float64(st.MeanVerify().Nanoseconds()) / 1e3,
		ExpertsPerVerify: st.MeanExpertsPerVerify()}
	if st.Rounds > 0 {
		ls.OffShare = float64(st.Off) / float64(st.Rounds)
	}
	row.Speculative = ls
	return row
}
