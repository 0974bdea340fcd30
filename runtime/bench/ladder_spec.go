package bench

import (
	"slices"

	"github.com/lesfarm/lesfarm/runtime/expert"
	"github.com/lesfarm/lesfarm/runtime/les"
	"github.com/lesfarm/lesfarm/runtime/model"
	"github.com/lesfarm/lesfarm/runtime/spec"
	"github.com/lesfarm/lesfarm/runtime/units"
)

// SpeculativeRow is the mode name of the ladder's last rung: speculative
// decoding (adaptive k) on top of the last expert mode measured
// (scheduled by default), with the same store configuration.
const SpeculativeRow = "speculative"

// LadderSpec is the speculative row's own telemetry: acceptance, accepted
// length, verify cost and the experts each verify pass routed to.
type LadderSpec struct {
	Drafter string `json:"drafter"`
	// K is the draft length: the largest one tried when Adaptive.
	K                   int     `json:"k"`
	Adaptive            bool    `json:"adaptive"`
	AcceptanceRate      float64 `json:"acceptance_rate"`
	MeanAccepted        float64 `json:"mean_accepted"`
	TokensPerTargetPass float64 `json:"tokens_per_target_pass"`
	VerifyUS            float64 `json:"verify_us"`
	ExpertsPerVerify    float64 `json:"experts_per_verify"`
	OffShare            float64 `json:"off_share"`
	// CutVerify reports that verify passes ended before drafted positions
	// that would read experts; CutShare is the share of drafted positions
	// left unverified so.
	CutVerify bool    `json:"cut_verify"`
	CutShare  float64 `json:"cut_share"`
	// PairedSpeedup is the median over repetitions of this row's decode
	// tok/s over the row before's in the same repetition (the two run back
	// to back, so slow drift of the machine or the disk cancels);
	// PairedMin and PairedMax are the extremes of those ratios.
	PairedSpeedup float64 `json:"paired_speedup"`
	PairedMin     float64 `json:"paired_min"`
	PairedMax     float64 `json:"paired_max"`
}

// pairedRatios returns the median, smallest and largest of the per
// repetition ratios of reps' decode tok/s over prev's (same index: the
// same repetition round).
func pairedRatios(reps, prev []les.Rep) (med, lo, hi float64) {
	var rs []float64
	for i := range min(len(reps), len(prev)) {
		if b := les.DecodeTPS(prev[i]); b > 0 {
			rs = append(rs, les.DecodeTPS(reps[i])/b)
		}
	}
	if len(rs) == 0 {
		return 0, 0, 0
	}
	slices.Sort(rs)
	n := len(rs)
	med = rs[n/2]
	if n%2 == 0 {
		med = (rs[n/2-1] + rs[n/2]) / 2
	}
	return med, rs[0], rs[n-1]
}

// specLadder is the speculative rung while the ladder runs: a session on
// the last mode's store configuration decoding through a les.Speculative.
type specLadder struct {
	s     *les.Session
	dec   *les.Speculative
	draft *model.Model
	r     *ladderRun
}

func (s *specLadder) close() {
	s.s.Close()
	if s.draft != nil {
		s.draft.Close()
	}
}

// loadSpecLadder loads the speculative rung on mode: the n-gram drafter
// (cfg.Draft "" or "ngram"), the target's MTP block ("mtp") or a draft
// model file (resident).
func loadSpecLadder(cfg LadderConfig, mode expert.Mode, budget units.Budget, base int64) (*specLadder, error) {
	ses, err := openMode(cfg, mode, budget, base, false, nil)
	if err != nil {
		return nil, err
	}
	s := &specLadder{s: ses, r: &ladderRun{identical: true, expertBytes: ses.ExpertBytes}}
	var dec *spec.Decoder
	switch cfg.Draft {
	case "", DraftNGram:
		dec, err = spec.NewWithDrafter(ses.Model, &spec.NGramDrafter{})
	case "mtp":
		dec, err = spec.NewMTP(ses.Model)
	default:
		if s.draft, err = model.Load(cfg.Draft, model.Options{Threads: cfg.Threads}); err != nil {
			break
		}
		dec, err = spec.New(ses.Model, s.draft)
	}
	if err != nil {
		s.close()
		return nil, err
	}
	s.dec = &les.Speculative{Dec: dec, K: spec.AdaptiveMaxK, Adaptive: true, CutVerify: cfg.VerifyCut, CutSlack: cfg.VerifyCutSlack}
	if cfg.DraftK > 0 {
		s.dec.K, s.dec.Adaptive = cfg.DraftK, false
	}
	ses.SetDecoder(s.dec)
	return s, nil
}

// row is the speculative rung's ladder row; prev is the row before it and
// prevReps its repetitions.
func (s *specLadder) row(rep *LadderReport, prev *LadderRow, prevReps []les.Rep) LadderRow {
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
	st := &s.dec.Stats
	ls := &LadderSpec{Drafter: st.Drafter, K: s.dec.K, Adaptive: s.dec.Adaptive, AcceptanceRate: st.AcceptanceRate(), MeanAccepted: st.MeanAccepted(),
		TokensPerTargetPass: st.TokensPerTargetPass(), VerifyUS: float64(st.MeanVerify().Nanoseconds()) / 1e3,
		ExpertsPerVerify: st.MeanExpertsPerVerify(), CutVerify: s.dec.CutVerify}
	ls.PairedSpeedup, ls.PairedMin, ls.PairedMax = pairedRatios(r.reps, prevReps)
	if d := st.Drafted + st.Cut; d > 0 {
		ls.CutShare = float64(st.Cut) / float64(d)
	}
	if st.Rounds > 0 {
		ls.OffShare = float64(st.Off) / float64(st.Rounds)
	}
	row.Speculative = ls
	return row
}
