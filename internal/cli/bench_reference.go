package cli

import "github.com/lesfarm/lesfarm/runtime/bench"

// referenceFlags checks --reference and --record-reference and sets the
// ladder's reference from them: a recorded file, an all-resident run to
// record, or (neither) the streamed on-demand mode.
func referenceFlags(lf *ladderFlags, lc *bench.LadderConfig) error {
	switch {
	case lf.reference != "" && lf.recordRef != "":
		return usagef("--reference reads a recorded reference and --record-reference writes one: give one of them")
	case (lf.reference != "" || lf.recordRef != "") && lf.replay != 0:
		return usagef("--reference and --record-reference check the model's own tokens: a --replay-compute run generates none")
	case (lf.reference != "" || lf.recordRef != "") && lf.twin != "":
		return usagef("--twin-check makes its own reference: drop --reference/--record-reference")
	case lf.recordRef != "":
		lc.ResidentReference = true
	case lf.reference != "":
		r, err := bench.ReadLadderReference(lf.reference)
		if err != nil {
			return usagef("--reference: %v", err)
		}
		lc.Reference = r
	}
	return nil
}
