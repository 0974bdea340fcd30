// Package moe defines the expert access interface between a Mixture-of-Experts
// model and whatever holds its expert weights. The model computes routing and
// expert math; a Source decides where the weights come from (RAM, or the LES
// expert store streaming from flash) and in which order they become ready.
//
// Exactness contract: a Source never changes which experts are used. The model
// computes each selected expert's output into its own buffer and combines them
// in a fixed order after all experts ran, so the order in which a Source hands
// out experts does not change a single bit of the output.
package moe

import (
	"context"
	"fmt"

	"github.com/lesfarm/lesfarm/runtime/tensor"
)

// Weights is one expert's SwiGLU matrices as raw tensor data in the file's
// types: Gate and Up are FFN rows × Hidden columns, Down is Hidden rows × FFN
// columns, all row-major (ggml layout). The slices are only valid during the
// callback they are passed to.
type Weights struct {
	Gate, Up, Down []byte
	// Swizzled says that each of the three whose type has a swizzled layout
	// on this machine (tensor.Swizzles) is in it; it is set on weights
	// whose holder owns their bytes (the resident loader's, and the experts
	// the store read into its own buffers), never on a view of the file.
	Swizzled bool
}

// LayerShape describes the expert matrices of one layer.
type LayerShape struct {
	Experts  int // experts in the layer
	Hidden   int // model width (ne0 of gate/up)
	FFN      int // expert FFN width (ne1 of gate/up)
	GateType tensor.Type
	UpType   tensor.Type
	DownType tensor.Type
}

// Swizzle rearranges w's gate, up and down (of layer shape s) in place
// into the kernels' swizzled layout where their type has one on this
// machine (tensor.Swizzle), and marks w Swizzled when one of them was. The
// caller must own the bytes, just read from the file, and swizzle them
// once.
func (w *Weights) Swizzle(s *LayerShape) error {
	swizzled := false
	for i, p := range [3]struct {
		name string
		t    tensor.Type
		d    []byte
	}{{"gate", s.GateType, w.Gate}, {"up", s.UpType, w.Up}, {"down", s.DownType, w.Down}} {
		ok, err := tensor.Swizzle(p.t, p.d)
		if err != nil {
			return fmt.Errorf("moe: swizzling part %d (%s): %w", i, p.name, err)
		}
		swizzled = swizzled || ok
	}
	w.Swizzled = swizzled
	return nil
}

// Matrices returns w's gate, up and down matrices of layer shape s, marked
// swizzled where w's are.
func (w *Weights) Matrices(s *LayerShape) (gate, up, down tensor.Matrix) {
	swz := func(t tensor.Type) bool { return w.Swizzled && tensor.Swizzles(t) }
	gate = tensor.Matrix{Type: s.GateType, Rows: s.FFN, Cols: s.Hidden, Data: w.Gate, Swizzled: swz(s.GateType)}
	up = tensor.Matrix{Type: s.UpType, Rows: s.FFN, Cols: s.Hidden, Data: w.Up, Swizzled: swz(s.UpType)}
	down = tensor.Matrix{Type: s.DownType, Rows: s.Hidden, Cols: s.FFN, Data: w.Down, Swizzled: swz(s.DownType)}
	return gate, up, down
}

// Bytes returns the size of one expert's gate, up and down data.
func (s LayerShape) Bytes() int64 {
	g, _ := s.GateType.RowSize(s.Hidden)
	u, _ := s.UpType.RowSize(s.Hidden)
	d, _ := s.DownType.RowSize(s.FFN)
	return int64(g)*int64(s.FFN) + int64(u)*int64(s.FFN) + int64(d)*int64(s.Hidden)
}

// Source provides expert weights to a model. Implementations must be safe for
// use by one model goroutine at a time; they may use their own goroutines
// internally.
type Source interface {
	// PredictK returns how many experts per token the model should predict
	// for the next layer with the lookahead router and pass to Prefetch.
	// Zero means the source does not want predictions and the model skips
	// computing them.
	PredictK() int

	// Prefetch hints that experts of layer will likely be demanded soon. It
	// must not block on I/O and must never delay a later Use.
	Prefetch(layer int, experts []int)

	// Use makes the weights of experts (distinct ids of one layer) available
	// and calls fn once per expert with i, the index into experts. The order
	// of calls is the source's choice (ready-first for a scheduler). Calls
	// happen on the caller's goroutine, one at a time. Use returns the first
	// error from fn or from reading, or ctx's error.
	Use(ctx context.Context, layer int, experts []int, fn func(i int, w Weights) error) error
}

// Batcher is implemented by Sources that want to know how many positions
// the next forward pass feeds (1 in decode); the model calls Batch before
// the pass's first Prefetch or Use. The expert store's device clock times
// only decode.
type Batcher interface {
	Batch(positions int)
}

// Residency is implemented by Sources that can tell, without blocking,
// whether an expert's weights are available without a new read (resident,
// or already being read). Speculative verification (model.State.CutVerify)
// uses it to keep drafted positions from adding reads.
type Residency interface {
	Resident(layer, expert int) bool
}

// Direct is implemented by Sources that hold every expert in memory for
// their whole life (no reads, no eviction): Expert returns an expert's
// weights, valid until the Source is closed, so a model may run several
// experts of a layer at once on its own threads instead of one at a time
// through Use. Calling it is safe from several goroutines.
type Direct interface {
	Expert(layer, expert int) Weights
}

// Resident is a Source that serves every expert from memory. Data[l][e] holds
// expert e of layer l. The zero value has no experts.
type Resident struct {
	Data [][]Weights
}

// PredictK implements Source; a resident source needs no predictions.
func (r *Resident) PredictK() int { return 0 }

// Prefetch implements Source; it does nothing.
func (r *Resident) Prefetch(int, []int) {}

// Expert implements Direct.
func (r *Resident) Expert(layer, expert int) Weights { return r.Data[layer][expert] }

// Use implements Source, calling fn in the order of experts.
func (r *Resident) Use(ctx context.Context, layer int, experts []int, fn func(int, Weights) error) error {
	for i, e := range experts {
		if err := ctx.Err(); err != nil {
			return err
		}
		if err := fn(i, r.Data[layer][e]); err != nil {
			return err
		}
	}
	return nil
}
