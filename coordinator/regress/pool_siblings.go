package regress

import "slices"

// DefaultPoolSiblings is how many sibling series lend a series their
// noise level by default, in the coordinator's monitor and in the offline
// `regress detect` alike.
const DefaultPoolSiblings = 16

// SiblingOf reports whether o is a sibling of k: another series of the
// same metric, device model, OS major and emulation (any suite, config or
// lineage), measured by the same phones, so its run-to-run noise pools
// with k's. store.RegressSiblingPoints and store.RegressSiblingsOf apply
// the same rule in SQL.
func (k SeriesKey) SiblingOf(o SeriesKey) bool {
	return k != o && k.Metric == o.Metric && k.DeviceModel == o.DeviceModel && k.OSMajor == o.OSMajor && k.Emulated == o.Emulated
}

// SiblingNoise is the pooled noise level of sibling series: PoolNoise of
// each one's SeriesNoise under cfg. The monitor computes the same pool,
// reusing each sibling's estimate while its window is unchanged.
func SiblingNoise(siblings [][]Point, higherIsBetter bool, cfg Config) NoisePrior {
	est := make([]NoisePrior, 0, len(siblings))
	for _, s := range siblings {
		est = append(est, SeriesNoise(s, higherIsBetter, cfg))
	}
	return PoolNoise(est)
}

// Pool says where DetectAll finds the siblings of a series named by its
// key (SeriesKey's String form; a series named otherwise has none). The
// zero value pools the input's own series, up to DefaultPoolSiblings.
type Pool struct {
	// Max is the most siblings per series: the input's first (in input
	// order), then stored ones (0: DefaultPoolSiblings; negative: none,
	// each series on its own noise).
	Max int
	// Stored, when set, returns up to n siblings of key kept elsewhere
	// (the coordinator's database), none of the keys in skip (the
	// input's own series).
	Stored func(key SeriesKey, skip []SeriesKey, n int) ([][]Point, error)
}

// siblings returns s's siblings among all and then from p.Stored, and how
// many came from p.Stored.
func (p Pool) siblings(s Series, all []Series) ([][]Point, int, error) {
	limit := p.Max
	if limit == 0 {
		limit = DefaultPoolSiblings
	}
	if limit < 0 {
		return nil, 0, nil
	}
	key, keyed := keyOf(s.Name)
	if !keyed {
		return nil, 0, nil
	}
	var out [][]Point
	var skip []SeriesKey
	for _, o := range all {
		ok, keyed := keyOf(o.Name)
		if !keyed {
			continue
		}
		skip = append(skip, ok)
		if key.SiblingOf(ok) && len(out) < limit {
			out = append(out, o.Points)
		}
	}
	if p.Stored == nil || len(out) >= limit {
		return out, 0, nil
	}
	more, err := p.Stored(key, slices.DeleteFunc(skip, func(k SeriesKey) bool { return k == key }), limit-len(out))
	if err != nil {
		return nil, 0, err
	}
	return append(out, more...), len(more), nil
}

// keyOf parses a series name as a key; false when it is not one (a
// series named otherwise has no siblings).
func keyOf(name string) (SeriesKey, bool) {
	k, err := ParseSeriesKey(name)
	return k, err == nil
}
