package store

import (
	"math"
	"slices"
)

// PointBucket says which builds a downsampled point summarises: the
// builds of the chart's shared axis from SeqFirst to the point's Seq, of
// which the series has Builds, with the lowest and highest of their
// means.
type PointBucket struct {
	SeqFirst int64   `json:"seq_first" doc:"Sequence number of the first build in the bucket (the point's seq is the last)."`
	Builds   int     `json:"builds" doc:"How many of the bucket's builds this series has a point for."`
	Min      float64 `json:"min" doc:"Lowest build mean in the bucket."`
	Max      float64 `json:"max" doc:"Highest build mean in the bucket."`
}

// DownsampleSeries bounds every series to at most maxPoints points, for
// charts of long histories (maxPoints ≤ 0 returns in unchanged). The
// builds of all the series are cut into the same buckets of consecutive
// builds in build order (BuildOrder), equal in count to within one, so
// the downsampled series still share an x axis; a bucket's point sits at
// its last build (seq, build, position, git sha) and carries the mean of
// its build means (value), the root mean square of their stddevs (the
// typical within-build spread, so the band keeps its meaning), the sum of
// their repetitions (n), the latest run key and executable, and
// Bucket with the bucket's range, size and min/max. Series with no more
// builds than maxPoints still get buckets of one build when others are
// cut, so every point of a response means the same thing.
func DownsampleSeries(in []SeriesWithPoints, maxPoints int) []SeriesWithPoints {
	if maxPoints <= 0 {
		return in
	}
	var all []RegressPoint
	builds := map[int64]*RegressPoint{}
	for _, s := range in {
		for i, p := range s.Points {
			all = append(all, p)
			if b := builds[p.Seq]; b == nil || b.Build == "" {
				builds[p.Seq] = &s.Points[i]
			}
		}
	}
	seqs := BuildOrder(all)
	if len(seqs) <= maxPoints {
		return in
	}
	// bucket i holds the union's builds [lo(i), lo(i+1)).
	lo := func(i int) int { return i * len(seqs) / maxPoints }
	first := make([]int64, maxPoints)
	last := make([]int64, maxPoints)
	bucketOf := make(map[int64]int, len(seqs))
	for i := range maxPoints {
		a, b := lo(i), lo(i+1)
		first[i], last[i] = seqs[a], seqs[b-1]
		for _, q := range seqs[a:b] {
			bucketOf[q] = i
		}
	}
	rank := make(map[int64]int, len(seqs))
	for i, q := range seqs {
		rank[q] = i
	}
	out := make([]SeriesWithPoints, len(in))
	for k, s := range in {
		out[k] = SeriesWithPoints{RegressSeries: s.RegressSeries, Points: []RegressPoint{}}
		s.Points = slices.Clone(s.Points)
		slices.SortStableFunc(s.Points, func(a, b RegressPoint) int { return rank[a.Seq] - rank[b.Seq] })
		var cur *RegressPoint
		var vals, sds []float64
		flush := func() {
			if cur == nil {
				return
			}
			cur.Value = finiteMean(vals)
			cur.Stddev = finiteRMS(sds)
			out[k].Points = append(out[k].Points, *cur)
			cur = nil
		}
		for _, p := range s.Points {
			b := bucketOf[p.Seq]
			if cur != nil && cur.Bucket.SeqFirst != first[b] {
				flush()
			}
			if cur == nil {
				lb := builds[last[b]]
				cur = &RegressPoint{SeriesID: p.SeriesID, Seq: last[b], Build: lb.Build, BuildPosition: lb.BuildPosition, GitSHA: lb.GitSHA,
					Bucket: &PointBucket{SeqFirst: first[b], Min: p.Value, Max: p.Value}}
				vals, sds = vals[:0], sds[:0]
			}
			cur.Bucket.Builds++
			cur.Bucket.Min = min(cur.Bucket.Min, p.Value)
			cur.Bucket.Max = max(cur.Bucket.Max, p.Value)
			cur.N += p.N
			cur.RunKey, cur.ExecutableSHA256 = p.RunKey, p.ExecutableSHA256
			vals, sds = append(vals, p.Value), append(sds, p.Stddev)
		}
		flush()
	}
	return out
}

// finiteMean is the mean of vs, computed so that finite values give a
// finite mean however large they are (a sum of two 1e308 overflows: each
// value is divided first).
func finiteMean(vs []float64) float64 {
	var m float64
	n := float64(len(vs))
	for _, v := range vs {
		m += v / n
	}
	return m
}

// finiteRMS is the root mean square of vs, scaled by the largest magnitude
// so that squaring cannot overflow.
func finiteRMS(vs []float64) float64 {
	var big float64
	for _, v := range vs {
		big = max(big, math.Abs(v))
	}
	if big == 0 || math.IsInf(big, 0) || math.IsNaN(big) {
		return big
	}
	var sq float64
	for _, v := range vs {
		sq += float64((v / big) * (v / big))
	}
	return big * math.Sqrt(sq/float64(len(vs)))
}
