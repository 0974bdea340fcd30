package regress

import (
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"math"
	"sort"
	"strconv"
	"strings"
	"time"
)

// Series is a named list of points, as read from a CSV file.
type Series struct {
	Name   string
	Points []Point
}

// MaxCSVRows bounds how many data rows ParseCSV accepts, so a mistaken
// input cannot exhaust memory.
const MaxCSVRows = 5_000_000

// ParseCSV reads series from CSV with the columns series,seq,value and
// optionally stddev,n. seq is an integer (build number, unix time) or a
// time (RFC 3339 or YYYY-MM-DD, read as unix seconds). A header row naming the columns (any order, extra
// columns ignored) is optional; without one the columns are taken in that
// order. Blank lines and lines starting with '#' are skipped. Empty
// stddev or n cells mean unknown. Series are returned in order of first
// appearance. Errors name the line and the problem.
func ParseCSV(r io.Reader) ([]Series, error) {
	cr := csv.NewReader(r)
	cr.FieldsPerRecord = -1
	cr.Comment = '#'
	cr.TrimLeadingSpace = true
	cr.ReuseRecord = true
	col := map[string]int{"series": 0, "seq": 1, "value": 2, "stddev": 3, "n": 4}
	byName := map[string]int{}
	var out []Series
	rows := 0
	first := true
	for {
		rec, err := cr.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			var pe *csv.ParseError
			if errors.As(err, &pe) {
				return nil, fmt.Errorf("csv line %d: %v", pe.Line, pe.Err)
			}
			return nil, fmt.Errorf("csv: %w", err)
		}
		line, _ := cr.FieldPos(0)
		if first {
			first = false
			if isHeader(rec) {
				col = map[string]int{"stddev": -1, "n": -1}
				for i, h := range rec {
					h = strings.ToLower(strings.TrimSpace(h))
					if i == 0 {
						h = strings.TrimPrefix(h, "\ufeff")
					}
					if _, dup := col[h]; dup && col[h] >= 0 {
						return nil, fmt.Errorf("csv line %d: duplicate column %q", line, h)
					}
					col[h] = i
				}
				for _, need := range []string{"series", "seq", "value"} {
					if _, ok := col[need]; !ok {
						return nil, fmt.Errorf("csv line %d: header lacks column %q (want series,seq,value[,stddev,n])", line, need)
					}
				}
				continue
			}
		}
		if len(rec) == 1 && strings.TrimSpace(rec[0]) == "" {
			continue
		}
		rows++
		if rows > MaxCSVRows {
			return nil, fmt.Errorf("csv line %d: more than %d rows", line, MaxCSVRows)
		}
		get := func(name string) (string, bool) {
			i, ok := col[name]
			if !ok || i < 0 || i >= len(rec) {
				return "", false
			}
			return strings.TrimSpace(rec[i]), true
		}
		name, ok := get("series")
		if !ok || name == "" {
			return nil, fmt.Errorf("csv line %d: missing series name", line)
		}
		s, ok := get("seq")
		if !ok {
			return nil, fmt.Errorf("csv line %d: missing seq", line)
		}
		seq, err := parseSeq(s)
		if err != nil {
			return nil, fmt.Errorf("csv line %d: seq %q: want an integer, an RFC 3339 time or a YYYY-MM-DD date", line, s)
		}
		v, ok := get("value")
		if !ok {
			return nil, fmt.Errorf("csv line %d: missing value", line)
		}
		val, err := parseFinite(v)
		if err != nil {
			return nil, fmt.Errorf("csv line %d: value %q: %v", line, v, err)
		}
		p := Point{Seq: seq, Value: val}
		if s, ok := get("stddev"); ok && s != "" {
			if p.Stddev, err = parseFinite(s); err != nil || p.Stddev < 0 {
				return nil, fmt.Errorf("csv line %d: stddev %q: want a finite number >= 0", line, s)
			}
		}
		if s, ok := get("n"); ok && s != "" {
			n, err := strconv.Atoi(s)
			if err != nil || n < 0 {
				return nil, fmt.Errorf("csv line %d: n %q: want an integer >= 0", line, s)
			}
			p.N = n
		}
		idx, ok := byName[name]
		if !ok {
			idx = len(out)
			byName[name] = idx
			out = append(out, Series{Name: strings.Clone(name)})
		}
		out[idx].Points = append(out[idx].Points, p)
	}
	if rows == 0 {
		return nil, errors.New("csv: no data rows (want series,seq,value[,stddev,n])")
	}
	return out, nil
}

// isHeader reports whether rec is a header row: its seq cell (or second
// cell) is not a number.
func isHeader(rec []string) bool {
	if len(rec) < 2 {
		return strings.EqualFold(strings.TrimSpace(rec[0]), "series")
	}
	_, err := strconv.ParseInt(strings.TrimSpace(rec[1]), 10, 64)
	return err != nil
}

// parseSeq reads a seq: an integer (build number, unix time), or a time
// (RFC 3339, or a date), which becomes unix seconds.
func parseSeq(s string) (int64, error) {
	if n, err := strconv.ParseInt(s, 10, 64); err == nil {
		return n, nil
	}
	for _, layout := range []string{time.RFC3339Nano, "2006-01-02T15:04:05", "2006-01-02 15:04:05", "2006-01-02"} {
		if t, err := time.Parse(layout, s); err == nil {
			return t.Unix(), nil
		}
	}
	return 0, errors.New("not a seq")
}

func parseFinite(s string) (float64, error) {
	v, err := strconv.ParseFloat(s, 64)
	if err != nil {
		return 0, errors.New("not a number")
	}
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return 0, errors.New("not finite")
	}
	return v, nil
}

// SeriesChangePoint is a change point of a named series, the element of
// the offline CLI's JSON output.
type SeriesChangePoint struct {
	Series string `json:"series"`
	ChangePoint
}

// Report is the offline detector's output.
type Report struct {
	ChangePoints []SeriesChangePoint `json:"change_points"`
	// Pooled lists the series judged with a noise level pooled from
	// siblings (DetectAll), in input order; omitted when none was.
	Pooled []PooledSeries `json:"pooled_noise,omitempty"`
}

// PooledSeries says which pooled noise a series was judged with.
type PooledSeries struct {
	Series string `json:"series"`
	// Siblings is how many sibling series lent their noise, of them
	// Stored how many came from the coordinator's database.
	Siblings int `json:"siblings"`
	Stored   int `json:"stored,omitempty"`
	// CV is the pooled relative noise (√RelVar) and DF its degrees of
	// freedom before the PoolDF cap.
	CV float64 `json:"cv"`
	DF float64 `json:"df"`
}

// DetectAll runs the monitor's detector on every series — DetectPooled,
// each series with the noise pooled from its siblings (pool) — and returns
// the change points ordered by series (input order) then seq.
func DetectAll(series []Series, higherIsBetter bool, cfg Config, pool Pool) (*Report, error) {
	rep := &Report{ChangePoints: []SeriesChangePoint{}}
	for _, s := range series {
		sib, stored, err := pool.siblings(s, series)
		if err != nil {
			return nil, err
		}
		prior := SiblingNoise(sib, higherIsBetter, cfg)
		if prior.DF > 0 {
			rep.Pooled = append(rep.Pooled, PooledSeries{Series: s.Name, Siblings: len(sib), Stored: stored, CV: math.Sqrt(prior.RelVar), DF: prior.DF})
		}
		cps, err := DetectPooled(s.Points, higherIsBetter, cfg, prior)
		if err != nil {
			return nil, err
		}
		for _, cp := range cps {
			rep.ChangePoints = append(rep.ChangePoints, SeriesChangePoint{Series: s.Name, ChangePoint: cp})
		}
	}
	return rep, nil
}

// WriteMarkdown writes the report as a Markdown table.
func (r *Report) WriteMarkdown(w io.Writer) error {
	var b strings.Builder
	if len(r.ChangePoints) == 0 {
		b.WriteString("No change points found.\n")
		r.writePooled(&b)
		_, err := io.WriteString(w, b.String())
		return err
	}
	b.WriteString("| series | seq | changed after … by (seq) | direction | change | before → after | p (t) | p (MW) | points before/after |\n")
	b.WriteString("|---|---:|---|---|---:|---|---:|---:|---:|\n")
	cps := append([]SeriesChangePoint(nil), r.ChangePoints...)
	sort.SliceStable(cps, func(i, j int) bool { return cps[i].Series < cps[j].Series })
	for _, c := range cps {
		fmt.Fprintf(&b, "| %s | %d | %s | %s | %+.1f%% | %.4g → %.4g | %.2g | %.2g | %d/%d |\n",
			mdEscape(c.Series), c.Seq, c.RangeString(), c.Direction, 100*c.RelativeChange, c.BeforeMean, c.AfterMean, c.PValue, c.MWPValue, c.BeforeN, c.AfterN)
	}
	r.writePooled(&b)
	_, err := io.WriteString(w, b.String())
	return err
}

// writePooled appends which series were judged with pooled noise.
func (r *Report) writePooled(b *strings.Builder) {
	for _, p := range r.Pooled {
		fmt.Fprintf(b, "\nNoise of %s pooled from %d sibling series (%d from the database): CV %.2f%%, %.0f degrees of freedom.", mdEscape(p.Series), p.Siblings, p.Stored, 100*p.CV, p.DF)
	}
	if len(r.Pooled) > 0 {
		b.WriteString("\n")
	}
}

func mdEscape(s string) string { return strings.ReplaceAll(s, "|", `\|`) }
