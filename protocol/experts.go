package protocol

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/lesfarm/lesfarm/jobs"
)

// Limits of a TelemetryBatch's per-expert counts.
const (
	// MaxExpertsPerLayer bounds expert ids: every id is below it.
	MaxExpertsPerLayer = 4096
	// MaxExpertEntries bounds the (expert, count) entries of one batch,
	// summed over its ExpertLoad rows. At about 5 bytes an entry on the
	// wire (4/3 of that in base64) it keeps the counts under half of
	// MaxTelemetryBytes; 40 layers × 256 experts is 10,240 entries.
	MaxExpertEntries = 1 << 16
)

// ExpertsEncoding names the wire encoding of TelemetryBatch.Experts.
const ExpertsEncoding = "varint-experts-v1"

// ExpertLoad is the per-expert load of one layer of one config, summed over
// the measured decode steps (repetition >= 0, phase decode: the steps the
// per-layer table counts) since the previous batch that carried expert
// counts. It is sparse: only experts demanded at least once are listed.
//
// An expert is demanded in a step when the router selected it for the
// step's token (trace.LayerEvent.Selected); the demand missed when the
// expert was not resident at that moment (trace.LayerEvent.Missed), else it
// hit. So Σ Demand − Σ Miss over a layer is the layer's hits and Σ Miss its
// misses, the same counts as the samples' per-layer hit and miss.
type ExpertLoad struct {
	ConfigIndex int `json:"cfg"`
	Layer       int `json:"layer"`
	// Steps is the number of measured decode steps counted.
	Steps int `json:"steps"`
	// Experts are the expert ids, strictly ascending; Demand[i] and
	// Miss[i] are expert Experts[i]'s counts (1 <= Demand, Miss <= Demand).
	Experts []int32 `json:"experts"`
	Demand  []int32 `json:"demand"`
	Miss    []int32 `json:"miss"`
}

// Hits returns Demand[i] - Miss[i].
func (e *ExpertLoad) Hits(i int) int32 { return e.Demand[i] - e.Miss[i] }

// expertsWire is the wire form of TelemetryBatch.Experts: one base64 blob of
// unsigned varints, row by row:
//
//	cfg layer steps K, then K times (id delta, demand, miss)
//
// where the first id delta is the id itself and each later one is the gap
// to the previous id (at least 1, as ids ascend strictly).
type expertsWire struct {
	N    int    `json:"n"`
	Enc  string `json:"enc"`
	Data []byte `json:"data"`
}

// marshalExperts returns the wire form of rows (nil when there are none).
func marshalExperts(rows []ExpertLoad) (*expertsWire, error) {
	if len(rows) == 0 {
		return nil, nil
	}
	n := 0
	for i := range rows {
		n += len(rows[i].Experts)
	}
	buf := make([]byte, 0, 8*len(rows)+4*n)
	for i := range rows {
		r := &rows[i]
		if len(r.Demand) != len(r.Experts) || len(r.Miss) != len(r.Experts) {
			return nil, fmt.Errorf("experts[%d]: experts, demand and miss must have the same length", i)
		}
		buf = binary.AppendUvarint(buf, uint64(max(r.ConfigIndex, 0)))
		buf = binary.AppendUvarint(buf, uint64(max(r.Layer, 0)))
		buf = binary.AppendUvarint(buf, uint64(max(r.Steps, 0)))
		buf = binary.AppendUvarint(buf, uint64(len(r.Experts)))
		prev := int32(0)
		for j, id := range r.Experts {
			if id < 0 || (j > 0 && id <= prev) {
				return nil, fmt.Errorf("experts[%d]: expert ids must ascend strictly from 0", i)
			}
			if r.Demand[j] < 0 || r.Miss[j] < 0 {
				return nil, fmt.Errorf("experts[%d]: negative count", i)
			}
			buf = binary.AppendUvarint(buf, uint64(id-prev))
			buf = binary.AppendUvarint(buf, uint64(r.Demand[j]))
			buf = binary.AppendUvarint(buf, uint64(r.Miss[j]))
			prev = id
		}
	}
	return &expertsWire{N: len(rows), Enc: ExpertsEncoding, Data: buf}, nil
}

// unmarshalExperts decodes the wire form, checking its shape and the
// ranges an int32 holds; validateExperts checks the values.
func unmarshalExperts(w *expertsWire) ([]ExpertLoad, error) {
	if w == nil {
		return nil, nil
	}
	if w.Enc != ExpertsEncoding {
		return nil, fmt.Errorf("experts.enc %q unsupported (want %s)", clip(w.Enc), ExpertsEncoding)
	}
	// Every row takes at least 4 bytes.
	if w.N < 0 || w.N > MaxExpertEntries || w.N > len(w.Data)/4 {
		return nil, fmt.Errorf("experts.n %d out of range", w.N)
	}
	r := varintReader{b: w.Data, what: "experts.data"}
	rows := make([]ExpertLoad, w.N)
	entries := 0
	for i := range rows {
		row := &rows[i]
		row.ConfigIndex = r.small("experts cfg", 1<<20)
		row.Layer = r.small("experts layer", MaxLayers)
		row.Steps = r.small("experts steps", 1<<30)
		k := r.small("experts count", MaxExpertsPerLayer)
		entries += k
		switch {
		case r.err != nil:
		case entries > MaxExpertEntries:
			r.err = fmt.Errorf("experts.data: more than %d entries", MaxExpertEntries)
		case len(r.b) < 3*k:
			r.err = errors.New("experts.data: truncated expert counts")
		}
		if r.err != nil {
			break
		}
		arr := make([]int32, 3*k)
		id := uint64(0)
		for j := range k {
			d := r.u()
			if j > 0 && d == 0 && r.err == nil {
				r.err = errors.New("experts.data: expert ids must ascend strictly")
			}
			id += min(d, MaxExpertsPerLayer)
			if id >= MaxExpertsPerLayer && r.err == nil {
				r.err = fmt.Errorf("experts.data: expert id out of range [0, %d)", MaxExpertsPerLayer)
			}
			arr[j] = int32(min(id, MaxExpertsPerLayer))
			arr[k+j] = r.i32u("experts demand")
			arr[2*k+j] = r.i32u("experts miss")
		}
		if r.err != nil {
			break
		}
		row.Experts, row.Demand, row.Miss = arr[:k:k], arr[k:2*k:2*k], arr[2*k:]
	}
	if r.err != nil {
		return nil, r.err
	}
	if len(r.b) != 0 {
		return nil, fmt.Errorf("experts.data: %d bytes after row %d", len(r.b), w.N)
	}
	return rows, nil
}

// i32u reads an unsigned varint that must fit in an int32.
func (r *varintReader) i32u(field string) int32 {
	v := r.u()
	if v >= 1<<31 && r.err == nil {
		r.err = fmt.Errorf("experts.data: %s %d out of int32 range", field, v)
	}
	return int32(min(v, 1<<31-1))
}

// validateExperts checks a batch's expert counts: known configs and
// layers, each (config, layer) once, ids strictly ascending below
// MaxExpertsPerLayer, 1 <= demand, miss <= demand, and no expert demanded
// more often than steps (an expert is demanded at most once a step).
func validateExperts(rows []ExpertLoad) error {
	if len(rows) > MaxExpertEntries {
		return fmt.Errorf("experts: %d rows, max %d", len(rows), MaxExpertEntries)
	}
	seen := make(map[[2]int]bool, len(rows))
	entries := 0
	for i := range rows {
		r := &rows[i]
		switch {
		case r.ConfigIndex < 0 || r.ConfigIndex >= jobs.MaxConfigs:
			return fmt.Errorf("experts[%d]: cfg %d out of range", i, r.ConfigIndex)
		case r.Layer < 0 || r.Layer >= MaxLayers:
			return fmt.Errorf("experts[%d]: layer %d out of range [0, %d)", i, r.Layer, MaxLayers)
		case r.Steps < 1 || r.Steps > 1<<30:
			return fmt.Errorf("experts[%d]: steps %d out of range [1, 2^30]", i, r.Steps)
		case len(r.Demand) != len(r.Experts) || len(r.Miss) != len(r.Experts):
			return fmt.Errorf("experts[%d]: experts, demand and miss must have the same length", i)
		case len(r.Experts) == 0:
			return fmt.Errorf("experts[%d]: no experts", i)
		case seen[[2]int{r.ConfigIndex, r.Layer}]:
			return fmt.Errorf("experts[%d]: cfg %d layer %d listed twice", i, r.ConfigIndex, r.Layer)
		}
		seen[[2]int{r.ConfigIndex, r.Layer}] = true
		if entries += len(r.Experts); entries > MaxExpertEntries {
			return fmt.Errorf("experts: more than %d entries", MaxExpertEntries)
		}
		for j, id := range r.Experts {
			switch {
			case id < 0 || id >= MaxExpertsPerLayer:
				return fmt.Errorf("experts[%d]: expert id %d out of range [0, %d)", i, id, MaxExpertsPerLayer)
			case j > 0 && id <= r.Experts[j-1]:
				return fmt.Errorf("experts[%d]: expert ids must ascend strictly", i)
			case r.Demand[j] < 1 || int(r.Demand[j]) > r.Steps:
				return fmt.Errorf("experts[%d]: expert %d demand %d out of range [1, steps %d]", i, id, r.Demand[j], r.Steps)
			case r.Miss[j] < 0 || r.Miss[j] > r.Demand[j]:
				return fmt.Errorf("experts[%d]: expert %d miss %d out of range [0, demand %d]", i, id, r.Miss[j], r.Demand[j])
			}
		}
	}
	return nil
}
